#!/usr/bin/env bash
# CPU throughput benchmark: gputrain vs PyTorch eager (bench/cpu_vs_pytorch.py).
# Builds first; arguments go to the Python script (e.g. --steps 40).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
GPUTRAIN_TARGET=gputrain bash scripts/build.sh >/dev/null
source scripts/env.sh
exec "$VENV/bin/python" bench/cpu_vs_pytorch.py --binary "${GPUTRAIN_BUILD_DIR:-build}/gputrain" "$@"
