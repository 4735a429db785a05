#!/usr/bin/env bash
# Installs what is needed, builds gputrain with its tests, and runs the CPU
# test suite (`ctest -LE gpu`; GPU tests skip themselves where no GPU exists).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
bash scripts/build.sh -DGPUTRAIN_BUILD_TESTS=ON
cd "${GPUTRAIN_BUILD_DIR:-build}"
ctest -LE gpu --output-on-failure -j "${GPUTRAIN_TEST_JOBS:-2}"
