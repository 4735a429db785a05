# Sourced by the other scripts: where things live, decided in one place.
# GPUTRAIN_VENV: the virtual environment holding the pip torch (LibTorch), kept
# outside the checkout so fresh clones and CI reuse it.
VENV="${GPUTRAIN_VENV:-$HOME/.cache/gputrain/venv}"
# The CUDA toolkit's usual home, for shells that did not source /etc/profile.d.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
# Whether the machine has a CUDA toolkit of torch's CUDA version (13) to build with (not the venv's).
system_cuda_toolkit() {
  local nvcc
  nvcc=$(command -v nvcc) && [[ $nvcc != "$VENV"/* ]] && "$nvcc" --version 2>/dev/null | grep -q "release 13\."
}
# Without one, the toolkit scripts/setup.sh assembles from NVIDIA's pip packages in the venv.
venv_cuda_root() {
  local d
  for d in "$VENV"/lib/python3*/site-packages/nvidia/cu13; do echo "$d"; return; done
}
if ! system_cuda_toolkit && [[ -x "$(venv_cuda_root)/bin/nvcc" ]]; then
  CUDAToolkit_ROOT="$(venv_cuda_root)"
  export CUDAToolkit_ROOT CUDACXX="$CUDAToolkit_ROOT/bin/nvcc" PATH="$CUDAToolkit_ROOT/bin:$PATH"
fi
