#!/usr/bin/env bash
# The single-device techniques benchmark (bench/techniques.py): tokens/s and
# peak memory per precision mode / checkpointing / attention, as a table.
# Builds first; arguments go to the script (e.g. --device cuda --steps 20).
source "$(dirname "$0")/bench-prepare.sh"
exec "$VENV/bin/python" bench/techniques.py --binary "$GPUTRAIN_BIN" "$@"
