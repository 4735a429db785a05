#!/usr/bin/env bash
# Set-up on a machine without a CUDA toolkit, shown on this one: in a private mount namespace, an
# empty directory hides /usr/local/cuda and nvcc is off the PATH; then scripts/setup.sh (which
# assembles the toolkit from NVIDIA's pip packages into the venv), a build into build-no-toolkit and
# a short training run. Needs root (unshare -m). CI keeps to the normal path; run this by hand:
#   bash scripts/check-without-cuda-toolkit.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" != --inside ]]; then exec unshare -m --propagation private bash "$0" --inside; fi
start=$SECONDS
[[ -d /usr/local/cuda ]] && mount -t tmpfs none /usr/local/cuda
for nvcc in $(type -ap nvcc); do mount --bind /dev/null "$nvcc"; done
if nvcc --version > /dev/null 2>&1; then echo "check: nvcc still runs in the namespace" >&2; exit 1; fi
echo "check: /usr/local/cuda is empty ($(ls -A /usr/local/cuda | wc -l) entries) and nvcc does not run"
bash scripts/setup.sh
GPUTRAIN_BUILD_DIR=build-no-toolkit GPUTRAIN_TARGET=gputrain bash scripts/build.sh
grep -E "CUDA|nvcc" build-no-toolkit/configure.log | head -5 || true
build-no-toolkit/gputrain run configs/smoke.yaml --output-dir runs/no-toolkit --overwrite --set metrics.progress=off
echo "check: set-up, build and training without a system CUDA toolkit took $((SECONDS - start)) s"
