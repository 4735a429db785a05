"""Reference check of our safetensors files with Hugging Face's `safetensors`.

usage: safetensors_interop.py OURS THEIRS
Loads OURS (written by gputrain's test), checks every tensor against the
values the test wrote (each tensor t = arange(numel) cast and reshaped, see
the test), then writes THEIRS with safetensors.torch.save_file for the test
to read back. Exits non-zero with a message on any mismatch.
"""
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

ours, theirs = sys.argv[1], sys.argv[2]
expected = {
    "f32": torch.arange(12, dtype=torch.float32).reshape(3, 4),
    "bf16": torch.arange(6, dtype=torch.float32).reshape(2, 3).to(torch.bfloat16),
    "f16": torch.arange(5, dtype=torch.float32).to(torch.float16),
    "i64": torch.arange(7, dtype=torch.int64),
    "u8": torch.arange(9, dtype=torch.uint8).reshape(3, 3),
    "empty": torch.zeros(0, 4, dtype=torch.float32),
}
with safe_open(ours, framework="pt") as f:
    if f.metadata() != {"format": "pt", "who": "gputrain"}:
        sys.exit(f"metadata {f.metadata()}")
    if set(f.keys()) != set(expected):
        sys.exit(f"keys {sorted(f.keys())}")
    for name, want in expected.items():
        got = f.get_tensor(name)
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            sys.exit(f"{name}: got {got.dtype} {tuple(got.shape)} {got}")

save_file({"weight": torch.arange(20, dtype=torch.float32).reshape(4, 5) / 4,
           "half": torch.arange(3, dtype=torch.float16),
           "idx": torch.tensor([-1, 5, 7], dtype=torch.int64)},
          theirs, metadata={"from": "python"})
print("ok")
