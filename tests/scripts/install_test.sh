#!/usr/bin/env bash
# `cmake --install` gives a gputrain that runs from any directory, with bash and zsh completion, and
# that finds LibTorch again through Python when the environment it was built against is gone.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR PYTHON
set -euo pipefail
build=$1 src=$2 python=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
cd /
"$tmp/prefix/bin/gputrain" validate "$src/configs/smoke.yaml" || fail "validate from /"
"$tmp/prefix/bin/gputrain" run "$src/configs/smoke.yaml" --output-dir "$tmp/run" --set train.max_steps=6 \
  --set train.eval_every=6 --set metrics.progress=off > "$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; fail "a short run"; }
[[ -s "$tmp/run/summary.json" ]] || fail "the run wrote no summary.json"

# bash: the installed script, asked as bash asks it.
complete_bash() {
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _gputrain; printf "%s\n" "${COMPREPLY[@]}"' \
    _ "$tmp/prefix/share/bash-completion/completions/gputrain" "$@"
}
[[ "$(complete_bash gputrain ru)" == run ]] || fail "bash: gputrain ru -> $(complete_bash gputrain ru)"
[[ "$(complete_bash gputrain data p)" == prepare ]] || fail "bash: gputrain data p"
[[ "$(complete_bash gputrain run --over)" == --overwrite ]] || fail "bash: gputrain run --over"
[[ "$(complete_bash gputrain run r.yaml --set optim.we)" == "optim.weight_decay=" ]] || fail "bash: --set optim.we"
# (grep reads a captured answer: with pipefail, grep -q ending a pipe early would fail its writer)
offers() { grep -q "$@"; }
offers -x "parallel.zero=" <<< "$(complete_bash gputrain plan --set parallel.)" || fail "bash: --set parallel."
offers -x -- "--merge-lora" <<< "$(complete_bash gputrain export --m)" || fail "bash: export --m"

# zsh: compadd and _files stand in for the completion system; they print what would be offered.
complete_zsh() {
  local current=$1
  shift
  zsh -fc 'compadd() { print -r -- "$@" }; _files() { print FILES }
    words=("${@:2}"); CURRENT=$1; PREFIX=${words[CURRENT]}; source '"$tmp/prefix/share/zsh/site-functions/_gputrain" \
    _ "$current" "$@"
}
command -v zsh > /dev/null || fail "zsh is not installed, so its completion cannot be checked (scripts/setup.sh installs it)"
offers -w data <<< "$(complete_zsh 2 gputrain da)" || fail "zsh: gputrain da"
offers -w -- --overwrite <<< "$(complete_zsh 3 gputrain run --ov)" || fail "zsh: gputrain run --ov"
offers -- "-S = -- .*optim.lr" <<< "$(complete_zsh 4 gputrain run --set optim.l)" || fail "zsh: --set optim.l"
[[ "$(complete_zsh 3 gputrain run conf)" == FILES ]] || fail "zsh: a recipe file"

# A moved environment: without the RPATH and with the recorded LibTorch gone, the binary alone
# cannot start, and the launcher finds the libraries through Python.
cp -a "$tmp/prefix" "$tmp/moved"
patchelf --remove-rpath "$tmp/moved/libexec/gputrain/gputrain"
torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
sed -i "s|$torch_lib|/nonexistent/torch/lib|g" "$tmp/moved/bin/gputrain"
if "$tmp/moved/libexec/gputrain/gputrain" --version > /dev/null 2>&1; then fail "the binary without RPATH still starts"; fi
GPUTRAIN_PYTHON=$python "$tmp/moved/bin/gputrain" validate "$src/configs/smoke.yaml" || fail "the launcher after a move"
set +e
GPUTRAIN_PYTHON=/nonexistent/python "$tmp/moved/bin/gputrain" --version > "$tmp/gone.log" 2>&1
code=$?
set -e
[[ $code == 127 ]] || fail "no torch anywhere: exit $code"
grep -q "fix: set GPUTRAIN_PYTHON" "$tmp/gone.log" || fail "no torch anywhere: $(cat "$tmp/gone.log")"
echo "install: ok"
