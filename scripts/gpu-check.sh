#!/usr/bin/env bash
# GPU host check (../shared/gpu-host.md): unpack the Debian dependencies that
# were downloaded into .deps/debs on a development machine (`scripts/gpu-check.sh
# --download` there), build against the host's pip torch for the local GPU,
# run the `gpu` tests, the quickstart and the techniques benchmark on the GPU, and write logs and a
# results JSON to $OUT (or ./gpu-check-out).
set -uo pipefail
cd "$(dirname "$0")/.."
DEBS=(libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
      nlohmann-json3-dev catch2)
if [[ "${1:-}" == "--download" ]]; then  # on a Debian development machine
  mkdir -p .deps/debs && (cd .deps/debs && apt-get download "${DEBS[@]}")
  echo "downloaded to .deps/debs; carry .deps to the GPU host"; exit 0
fi
OUT="${OUT:-$PWD/gpu-check-out}"; mkdir -p "$OUT"
PREFIX="$PWD/.deps/prefix"; mkdir -p "$PREFIX"
for f in .deps/debs/*.deb; do dpkg -x "$f" "$PREFIX"; done
export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
TORCH_PREFIX="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')"
{ nvidia-smi; python3 -c 'import torch;print(torch.__version__, torch.cuda.get_device_name())'; } > "$OUT/env.log" 2>&1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DGPUTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DTORCH_CUDA_ARCH_LIST=9.0 -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$PREFIX/usr;$PREFIX/usr/lib/x86_64-linux-gnu/cmake" \
  > "$OUT/build.log" 2>&1 && cmake --build build-gpu -j "$(nproc)" >> "$OUT/build.log" 2>&1
build=$?
(cd build-gpu && ctest -L gpu --output-on-failure) > "$OUT/gpu-tests.log" 2>&1; tests=$?
./build-gpu/gputrain run --output-dir "$OUT/quickstart" --overwrite --set metrics.progress=lines > "$OUT/quickstart.log" 2>&1; qs=$?
# The single-device techniques table on the GPU (docs/benchmarks.md), GPT-2-small-like shapes.
python3 bench/techniques.py --binary build-gpu/gputrain --device cuda --steps 20 --vocab 50304 --d 768 --heads 12 \
  --layers 12 --seq 1024 --batch 8 > "$OUT/techniques.md" 2>&1
# The optimizer table on the GPU (fp32 and bf16 weights), GPT-2 124M.
for mode in fp32 bf16-pure; do
  ./build-gpu/gputrain optim bench configs/gpt2-124m.yaml --steps 20 --set run.device=cuda \
    --set precision.mode=$mode > "$OUT/optim-$mode.md" 2>&1
done
python3 - "$OUT" "$build" "$tests" "$qs" <<'PY'
import json, os, sys
out, build, tests, qs = sys.argv[1], *map(int, sys.argv[2:])
summary = {}
p = os.path.join(out, "quickstart", "summary.json")
if os.path.exists(p):
    summary = json.load(open(p))
res = {"build_rc": build, "gpu_tests_rc": tests, "quickstart_rc": qs,
       "quickstart": {k: summary.get(k) for k in ("device", "tokens_per_s", "eval_loss", "entropy_floor", "mem_peak_mb")}}
json.dump(res, open(os.path.join(out, "results.json"), "w"), indent=2)
print("| check | result |\n|---|---|")
for k, v in res.items():
    print(f"| {k} | {v} |")
PY
