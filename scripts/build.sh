#!/usr/bin/env bash
# Configures and builds gputrain into ./build (Release). Extra arguments go to
# CMake's configure step, e.g. -DGPUTRAIN_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
BUILD_DIR="${GPUTRAIN_BUILD_DIR:-build}"
TORCH_PREFIX="$("$VENV/bin/python" -c 'import torch;print(torch.utils.cmake_prefix_path)')"
JOBS="${GPUTRAIN_JOBS:-$(nproc)}"
# Ninja (scripts/setup.sh installs it) compiles any module's sources while others still link, where
# make finishes each library before starting the next; a build folder keeps the generator it has.
GENERATOR=()
[[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] && command -v ninja > /dev/null && GENERATOR=(-G Ninja)
mkdir -p "$BUILD_DIR"

cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
      -DGPUTRAIN_PYTHON="$VENV/bin/python" "$@" \
      > "$BUILD_DIR/configure.log" 2>&1 \
  || { cat "$BUILD_DIR/configure.log"; exit 1; }
grep -E "gputrain:" "$BUILD_DIR/configure.log" || true
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${GPUTRAIN_TARGET:-all}"
