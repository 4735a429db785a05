#!/usr/bin/env bash
# Installs what is needed, builds gputrain, and trains the built-in quickstart
# recipe (about a minute on 2 CPU cores; on the GPU where LibTorch sees one).
# Metrics land in runs/quickstart/. Extra arguments go to `gputrain run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
GPUTRAIN_TARGET=gputrain bash scripts/build.sh
exec ./"${GPUTRAIN_BUILD_DIR:-build}"/gputrain run --overwrite "$@"
