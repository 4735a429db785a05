#!/usr/bin/env bash
# Installs what is needed, builds gputrain with its tests, and runs the CPU
# test suite (`ctest -LE gpu`; GPU tests skip themselves where no GPU exists),
# then prints the 25 slowest tests (docs/contributing.md keeps the suite's time budget).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
bash scripts/build.sh -DGPUTRAIN_BUILD_TESTS=ON
BUILD_DIR="${GPUTRAIN_BUILD_DIR:-build}"
status=0
(cd "$BUILD_DIR" && ctest -LE gpu --output-on-failure -j "${GPUTRAIN_TEST_JOBS:-2}") || status=$?
python3 scripts/slowest_tests.py "$BUILD_DIR" 25 || true
exit "$status"
