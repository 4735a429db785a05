#!/usr/bin/env bash
# Peak memory of data prepare on growing Parquet files (bench/parquet_memory.py); builds first.
source "$(dirname "$0")/bench-prepare.sh"
exec "$VENV/bin/python" bench/parquet_memory.py --binary "$GPUTRAIN_BIN" --shared "$(cd ../shared/data && pwd)" "$@"
