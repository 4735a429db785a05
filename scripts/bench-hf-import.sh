#!/usr/bin/env bash
# Peak memory of model.init_from on a sharded Hugging Face model (bench/hf_import_memory.py); builds first.
source "$(dirname "$0")/bench-prepare.sh"
exec "$VENV/bin/python" bench/hf_import_memory.py --binary "$GPUTRAIN_BIN" "$@"
