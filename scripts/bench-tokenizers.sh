#!/usr/bin/env bash
# Tokenizer speed: gputrain data prepare vs HF tokenizers / sentencepiece, one core each
# (bench/tokenizer_speed.py). Builds first and makes the tokenizer files the tests use.
source "$(dirname "$0")/bench-prepare.sh"
SHARED="$(cd ../shared/data && pwd)"
TOKENIZERS="${GPUTRAIN_BUILD_DIR:-build}/bench_tokenizers"
[[ -f "$TOKENIZERS/gpt2/tokenizer.json" ]] || "$VENV/bin/python" tests/reference/make_tokenizers.py "$SHARED" "$TOKENIZERS"
exec "$VENV/bin/python" bench/tokenizer_speed.py --binary "$GPUTRAIN_BIN" --tokenizers "$TOKENIZERS" --shared "$SHARED" "$@"
