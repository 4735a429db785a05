# Sourced by the benchmark scripts: installs what is missing, builds the
# binary, and leaves $VENV and $GPUTRAIN_BIN set for the Python driver.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh --tests >/dev/null
GPUTRAIN_TARGET=gputrain bash scripts/build.sh >/dev/null
source scripts/env.sh
GPUTRAIN_BIN="${GPUTRAIN_BUILD_DIR:-build}/gputrain"
