#!/usr/bin/env bash
# CPU throughput benchmark: gputrain vs PyTorch eager (bench/cpu_vs_pytorch.py).
# Builds first; arguments go to the Python script (e.g. --steps 40).
source "$(dirname "$0")/bench-prepare.sh"
exec "$VENV/bin/python" bench/cpu_vs_pytorch.py --binary "$GPUTRAIN_BIN" "$@"
