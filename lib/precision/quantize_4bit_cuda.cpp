// dequantize_4bit_into for device tensors: the kernel of kernels/dequant_4bit.cuh on the tensor's stream.
#include <ATen/cuda/CUDAContext.h>

#include <algorithm>

#include "dequant_4bit.cuh"
#include "precision/quantize_4bit.h"

namespace gputrain {

void dequantize_4bit_cuda(const Quantized4bit& q, torch::Tensor& out) {
  TORCH_CHECK(out.is_cuda() && out.is_contiguous() && out.numel() == q.numel() && q.codes.is_cuda(),
              "dequantize_4bit_cuda: device tensors, the output contiguous and of the weight's size");
  kernels::Dequant4bitArgs a;
  const torch::Tensor code = quant4_code(q.type);  // on the host: passed by value
  std::copy(code.data_ptr<float>(), code.data_ptr<float>() + 16, a.code);
  const torch::Tensor codes = q.codes.contiguous(), absmax = q.absmax.contiguous();
  a.codes = codes.data_ptr<uint8_t>();
  a.n = q.numel();
  a.block = q.block_size;
  if (q.nested) {
    a.absmax_codes = absmax.data_ptr<uint8_t>();
    a.nested_code = q.nested_code.data_ptr<float>();
    a.nested_absmax = q.nested_absmax.data_ptr<float>();
    a.nested_block = q.nested_block_size;
    a.offset = q.offset;
  } else {
    a.absmax = absmax.data_ptr<float>();
  }
  kernels::FloatType type = kernels::FloatType::kFloat32;
  if (out.scalar_type() == torch::kBFloat16) type = kernels::FloatType::kBFloat16;
  else if (out.scalar_type() == torch::kHalf) type = kernels::FloatType::kFloat16;
  else TORCH_CHECK(out.scalar_type() == torch::kFloat, "dequantize_4bit_cuda: float32, bfloat16 or float16 out");
  kernels::launch_dequantize_4bit(a, out.data_ptr(), type,
                                  at::cuda::getCurrentCUDAStream(out.device().index()).stream());
}

}  // namespace gputrain
