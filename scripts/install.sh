#!/usr/bin/env bash
# Installs gputrain under a prefix (default ~/.local) so it runs from any directory:
# PREFIX/bin/gputrain, the binary in PREFIX/libexec/gputrain, bash and zsh completion under
# PREFIX/share (docs/install.md). Sets up and builds first (both skip what is done already).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$HOME/.local"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prefix) [[ $# -ge 2 ]] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }
              prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    -h|--help) echo "usage: bash scripts/install.sh [--prefix DIR]   (default: ~/.local)"; exit 0 ;;
    *) printf "install.sh: unknown argument '%s'\n    fix: bash scripts/install.sh [--prefix DIR]\n" "$1" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh
GPUTRAIN_TARGET=gputrain_completions bash scripts/build.sh  # the binary and its completion scripts
cmake --install "${GPUTRAIN_BUILD_DIR:-build}" --prefix "$prefix"
echo "install: gputrain is $prefix/bin/gputrain"
case ":$PATH:" in *":$prefix/bin:"*) ;; *) echo "  add it to PATH: export PATH=\"$prefix/bin:\$PATH\"" ;; esac
echo "  bash completion: $prefix/share/bash-completion/completions/gputrain (loaded by bash-completion for"
echo "    ~/.local; otherwise add to ~/.bashrc: source $prefix/share/bash-completion/completions/gputrain)"
echo "  zsh completion: add to ~/.zshrc before compinit: fpath=($prefix/share/zsh/site-functions \$fpath)"
