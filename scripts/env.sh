# Sourced by the other scripts: where things live, decided in one place.
# GPUTRAIN_VENV: the virtual environment holding the pip torch (LibTorch), kept
# outside the checkout so fresh clones and CI reuse it.
VENV="${GPUTRAIN_VENV:-$HOME/.cache/gputrain/venv}"
# The CUDA toolkit's usual home, for shells that did not source /etc/profile.d.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
