#!/usr/bin/env bash
# The single-device techniques benchmark (bench/techniques.py): tokens/s and
# peak memory per precision mode / checkpointing / attention, as a table.
# Builds first; arguments go to the script (e.g. --device cuda --steps 20).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
GPUTRAIN_TARGET=gputrain bash scripts/build.sh >/dev/null
source scripts/env.sh
exec "$VENV/bin/python" bench/techniques.py --binary "${GPUTRAIN_BUILD_DIR:-build}/gputrain" "$@"
