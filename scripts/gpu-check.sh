#!/usr/bin/env bash
# GPU host check (../shared/gpu-host.md): unpack the Debian dependencies that
# were downloaded into .deps/debs on a development machine (`scripts/gpu-check.sh
# --download` there), build against the host's pip torch for the local GPU,
# run the `gpu` tests, the quickstart and the GPU benchmarks, and write logs and a
# results JSON to $OUT (or ./gpu-check-out).
#
# GPU time is scarce and the host has 16 cores: `scripts/gpu-check.sh --pack`
# on a development machine whose build/ has the CUDA kernels for sm_90 (the
# default TORCH_CUDA_ARCH_LIST "8.0;9.0" gives them) copies the binaries, the three
# Debian shared libraries they need and ../shared/data into .deps/prebuilt;
# carry .deps and the host runs those instead of building (same torch 2.11).
#
# TESTS picks the gpu tests (a Catch spec; "none" = none), STAGES the steps after them (below).
# results.json names the failed tests; OUT_ARCHIVE=1 packs the other files into one archive.
set -uo pipefail
cd "$(dirname "$0")/.."
DEBS=(libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
      nlohmann-json3-dev catch2)
if [[ "${1:-}" == "--download" ]]; then  # on a Debian development machine
  mkdir -p .deps/debs && (cd .deps/debs && apt-get download "${DEBS[@]}")
  echo "downloaded to .deps/debs; carry .deps to the GPU host"; exit 0
fi
if [[ "${1:-}" == "--pack" ]]; then  # on a development machine, after building with CUDA
  # Our kernels must hold sm_90 code for the H100/H200 (the nvcc flags come from TORCH_CUDA_ARCH_LIST,
  # "8.0;9.0" unless set otherwise).
  if ! grep -qs 'code=sm_90' build/kernels/CMakeFiles/gputrain_kernels.dir/flags.make build/build.ninja; then
    echo "build/ has no CUDA kernels for sm_90: configure it with TORCH_CUDA_ARCH_LIST including 9.0" \
         "(the default) and GPUTRAIN_CUDA=auto or ON, rebuild, then --pack" >&2
    exit 1
  fi
  # The binaries of the tree as it is now, so that the commit recorded below is theirs (only the two
  # that travel: the CPU test suite is not needed for this).
  cmake --build build -j "${GPUTRAIN_JOBS:-2}" --target gputrain gputrain_gpu_tests > /dev/null ||
    { echo "the build failed: fix it, then --pack" >&2; exit 1; }
  P=.deps/prebuilt; rm -rf "$P"; mkdir -p "$P/lib" "$P/tests"
  cp build/gputrain "$P/" && cp build/tests/gputrain_gpu_tests "$P/tests/" || exit 1
  for l in libyaml-cpp.so.0.7 libspdlog.so.1.10 libfmt.so.9 libpcre2-8.so.0 libutf8proc.so.2 \
           libsentencepiece.so.0 libzstd.so.1; do cp -L "/lib/x86_64-linux-gnu/$l" "$P/lib/"; done
  # Arrow and Parquet as the pyarrow wheel ships them (62 MB): compressed, or the carry passes its 64 MiB.
  arrow_dir="$(dirname "$(ldd build/gputrain | awk '/libarrow.so/ {print $3}')")"
  tar -C "$arrow_dir" -cJf "$P/arrow-libs.tar.xz" $(cd "$arrow_dir" && ls libarrow.so.[0-9]* libparquet.so.[0-9]*) || exit 1
  cp -r ../shared/data "$P/shared-data" && chmod -R u+w "$P/shared-data"
  pwd > "$P/source-dir"  # the tests have this path compiled in
  # Which sources the binaries are (the host's copy of the tree need not have .git); the same
  # name `gputrain --version` prints.
  git describe --always --dirty > "$P/commit"
  du -sh "$P"; exit 0
fi
OUT="${OUT:-$PWD/gpu-check-out}"; mkdir -p "$OUT"
PREFIX="$PWD/.deps/prefix"; mkdir -p "$PREFIX"
for f in .deps/debs/*.deb; do [[ -f "$f" ]] && dpkg -x "$f" "$PREFIX"; done
export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
TORCH_PREFIX="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')"
{ nvidia-smi; python3 -c 'import torch;print(torch.__version__, torch.cuda.get_device_name())'; } > "$OUT/env.log" 2>&1
if [[ -d .deps/prebuilt ]]; then
  # Put the binaries and the data where the test binary's compiled-in paths point.
  src="$(cat .deps/prebuilt/source-dir)"
  if [[ "$src" != "$PWD" ]]; then mkdir -p "$(dirname "$src")" && ln -sfn "$PWD" "$src"; fi
  mkdir -p "$src/../shared" build/tests && cp -rn .deps/prebuilt/shared-data "$src/../shared/data" 2>/dev/null
  cp .deps/prebuilt/gputrain build/ && cp .deps/prebuilt/tests/gputrain_gpu_tests build/tests/
  [[ -f .deps/prebuilt/arrow-libs.tar.xz ]] && tar -C .deps/prebuilt/lib -xJf .deps/prebuilt/arrow-libs.tar.xz
  export LD_LIBRARY_PATH="$PWD/.deps/prebuilt/lib:$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')/lib:$LD_LIBRARY_PATH"
  commit="$(cat .deps/prebuilt/commit 2>/dev/null || echo unknown)"
  BUILD=build; build=0; BINARIES="prebuilt at $commit"
  echo "prebuilt binaries from $src, commit $commit" > "$OUT/build.log"
else
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DGPUTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTORCH_CUDA_ARCH_LIST=9.0 -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$PREFIX/usr;$PREFIX/usr/lib/x86_64-linux-gnu/cmake" \
    > "$OUT/build.log" 2>&1 && cmake --build build-gpu -j "$(nproc)" >> "$OUT/build.log" 2>&1
  build=$?; BUILD=build-gpu; BINARIES="built here for sm_90"
fi
# At most 8 files come back from the device tool's $OUT: the quickstart's run
# directory stays in /tmp and its summary goes into results.json.
TESTS="${TESTS:-}"  # a Catch test spec, e.g. "*resumed*" (no spaces); empty = every gpu test; "none" = no tests
if [[ "$TESTS" == none ]]; then
  tests=-1; echo "TESTS=none: no tests run" > "$OUT/gpu-tests.log"
elif [[ "$BUILD" == build ]]; then  # no CTest files travel: run the Catch binary directly
  timeout 420 ./build/tests/gputrain_gpu_tests --durations yes $TESTS > "$OUT/gpu-tests.log" 2>&1; tests=$?
else
  (cd build-gpu && timeout 420 ctest -L gpu --output-on-failure) > "$OUT/gpu-tests.log" 2>&1; tests=$?
fi
QS=/tmp/gputrain-quickstart; qs=-1; rm -rf "$QS"  # a summary from an earlier call would pass for this one
# STAGES picks the steps after the tests (one device call lasts at most 10 minutes): unset = all of
# them, "none" (or empty) = none.
STAGES="${STAGES-quickstart vs-pytorch profile kernels techniques batches optim fp8}"
[[ "$STAGES" == none ]] && STAGES=""
has() { [[ " $STAGES " == *" $1 "* ]]; }
has quickstart && { timeout 120 ./$BUILD/gputrain run --output-dir $QS --overwrite --set metrics.progress=lines > "$OUT/quickstart.log" 2>&1; qs=$?; }
# gputrain vs PyTorch eager and torch.compile, GPT-2 124M bf16 (issue 9's goal); VS_BATCH sets the batch (16).
has vs-pytorch && timeout 300 python3 bench/gpu_vs_pytorch.py --binary $BUILD/gputrain --batch "${VS_BATCH:-16}" > "$OUT/vs-pytorch.md" 2>&1
# Where the time goes, kernel by kernel, gputrain vs eager (gputrain-ops.md, eager-ops.md).
if has profile; then
  timeout 240 python3 bench/gpu_vs_pytorch.py --binary $BUILD/gputrain --batch 16 --profile "$OUT" \
    > /tmp/gputrain-profile.log 2>&1 || tail -20 /tmp/gputrain-profile.log
fi
# Each fused kernel against the ATen ops it replaces, GPT-2 124M shapes (bf16 mixed, fp32, bf16-pure).
has kernels && for mode in bf16 fp32 bf16-pure; do
  timeout 120 ./$BUILD/gputrain kernels bench configs/gpt2-124m.yaml --set run.device=cuda \
    --set precision.mode=$mode >> "$OUT/kernels.md" 2>&1
done
# The single-device techniques table on the GPU (docs/benchmarks.md), GPT-2-small-like shapes.
has techniques && timeout 300 python3 bench/techniques.py --binary $BUILD/gputrain --device cuda --steps 20 --vocab 50304 --d 768 \
  --heads 12 --layers 12 --seq 1024 --batch 8 > "$OUT/techniques.md" 2>&1
# Tokens/s and peak memory against the batch size (8..64), GPT-2 124M, checkpointing off and on, for
# the precision modes in BATCH_MODES: all five take longer than one device call, so a second call
# with STAGES=batches TESTS=none BATCH_MODES=fp32,tf32 completes the table.
has batches && timeout 500 python3 bench/batch_sizes.py --binary $BUILD/gputrain --device cuda \
  --modes "${BATCH_MODES:-bf16,fp16,bf16-pure}" > "$OUT/batches.md" 2>&1
# The optimizer table on the GPU (fp32 and bf16 weights), GPT-2 124M.
has optim && for mode in fp32 bf16-pure; do
  timeout 120 ./$BUILD/gputrain optim bench configs/gpt2-124m.yaml --steps 20 --set run.device=cuda \
    --set precision.mode=$mode >> "$OUT/optim.md" 2>&1
done
# FP8 against bf16 for each GEMM of GPT-2 124M's step, alone and with its input casts (issue 59).
has fp8 && timeout 120 python3 bench/fp8_matmul.py > "$OUT/fp8.md" 2>&1
# results.json (exit codes, Catch's summary, the failed tests' names, the quickstart) and its table.
python3 scripts/gpu_check_results.py "$OUT" "$QS" "$BINARIES" "$build" "$tests" "$qs"
# OUT_ARCHIVE=1: every file but results.json goes into $OUT/gpu-check.tar.gz, for callers that can take
# only a few files back (the device tool returns at most 8).
if [[ "${OUT_ARCHIVE:-0}" == 1 ]]; then
  (cd "$OUT" && files=$(ls | grep -v -e '^results.json$' -e '^gpu-check.tar.gz$') &&
     [[ -n "$files" ]] && tar czf gpu-check.tar.gz $files && rm -f $files)
fi
