"""Reference 4-bit quantization with bitsandbytes (its CPU backend), for quantize_4bit_test.cpp.

usage: bnb_quantize_4bit.py OUT.safetensors
For each case (shape, dtype, quant type, block size, double quantization) writes the input
`<case>.input` and what bitsandbytes.functional.quantize_4bit gives: `<case>.codes`, `.absmax`,
with double quantization `.nested_absmax`, `.nested_code` and `.offset`, and dequantize_4bit's
`.dequant`. The metadata key "cases" lists them comma-separated as name:quant_type:block_size.
"""
import sys

import torch
import bitsandbytes.functional as F
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
from bitsandbytes.backends.utils import _get_4bit_code
from safetensors.torch import save_file

CASES = [
    # name, shape, dtype, quant type, block size, double quant, scale
    ("nf4_bf16_dq", (96, 64), torch.bfloat16, "nf4", 64, True, 0.02),
    ("nf4_f32_dq_ragged", (37, 29), torch.float32, "nf4", 64, True, 1.0),
    ("nf4_f32_plain", (300, 7), torch.float32, "nf4", 64, False, 3.0),
    ("fp4_bf16_dq", (64, 48), torch.bfloat16, "fp4", 64, True, 0.05),
    ("fp4_f32_plain_odd", (5, 13), torch.float32, "fp4", 32, False, 1.0),
    ("nf4_bf16_b128", (130, 70), torch.bfloat16, "nf4", 128, True, 0.01),
    ("nf4_bf16_many_blocks", (512, 300), torch.bfloat16, "nf4", 64, True, 0.02),
    ("nf4_f32_tiny", (3,), torch.float32, "nf4", 64, True, 1.0),
    ("nf4_f16_b256", (40, 40), torch.float16, "nf4", 256, True, 0.1),
    ("nf4_bf16_zero_rows", (16, 64), torch.bfloat16, "nf4", 64, True, 0.02),
]

out = {}
for i, (name, shape, dtype, qt, bs, dq, scale) in enumerate(CASES):
    g = torch.Generator().manual_seed(1000 + i)
    x = (torch.randn(shape, generator=g) * scale).to(dtype)
    if name.endswith("zero_rows"):
        x[3:5] = 0
    q, st = F.quantize_4bit(x, blocksize=bs, compress_statistics=dq, quant_type=qt)
    out[f"{name}.input"] = x
    out[f"{name}.codes"] = q
    out[f"{name}.absmax"] = st.absmax
    if dq:
        out[f"{name}.nested_absmax"] = st.state2.absmax
        out[f"{name}.nested_code"] = st.state2.code
        out[f"{name}.offset"] = st.offset.reshape(1).float()
    if shape[-1] % bs == 0 or shape[-1] % 2:
        out[f"{name}.dequant"] = F.dequantize_4bit(q, st)
    else:
        # bitsandbytes' AVX-512 CPU kernel takes one block per row when a row is not whole blocks
        # (absmax index row * (cols // blocksize)), wrong for such shapes; its generic path is right.
        absmax = F.dequantize_blockwise(st.absmax, st.state2) + st.offset if dq else st.absmax
        code = _get_4bit_code(qt, x.device)
        out[f"{name}.dequant"] = _dequantize_4bit_compute(q.reshape(-1), absmax.float(), code, bs, shape, dtype)
save_file({k: v.contiguous() for k, v in out.items()}, sys.argv[1],
          metadata={"cases": ",".join(f"{c[0]}:{c[3]}:{c[4]}" for c in CASES)})
print("ok")
