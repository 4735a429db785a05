// What the autograd functions over our CUDA kernels share (include from
// *_cuda.cpp files only): the kernels' element type for an ATen dtype, their
// alignment test, the current CUDA stream of a tensor's device, and the
// column sums that finish a weight/bias gradient from the kernels' per-block
// partial rows.
#pragma once
#include <ATen/cuda/CUDAContext.h>

#include <cstdint>
#include <optional>

#include "column_sum.cuh"
#include "float_type.h"

namespace gputrain {

inline std::optional<kernels::FloatType> kernel_float_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return kernels::FloatType::kFloat32;
    case at::kBFloat16:
      return kernels::FloatType::kBFloat16;
    case at::kHalf:
      return kernels::FloatType::kFloat16;
    default:
      return std::nullopt;
  }
}

// The vectorized kernels load 16 bytes at a time.
inline bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

inline cudaStream_t kernel_stream(const at::Tensor& t) {
  return at::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

// partial [rows, cols] fp32 (contiguous) -> [cols] fp32, summed in a fixed order.
inline at::Tensor column_sum(const at::Tensor& partial) {
  at::Tensor out = at::empty({partial.size(1)}, partial.options());
  kernels::launch_column_sum(partial.data_ptr<float>(), partial.size(0), partial.size(1), out.data_ptr<float>(),
                             kernel_stream(partial));
  return out;
}

}  // namespace gputrain
