// Device-side conversions between fp32 arithmetic and the stored element
// types (float, __nv_bfloat16, __half), and the dispatch from FloatType to
// a C++ type. Round-to-nearest-even, as ATen's casts.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "float_type.h"

namespace gputrain::kernels {

template <class T>
__device__ __forceinline__ float to_float(T x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else return static_cast<float>(x);
}

template <class T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return __float2half_rn(x);
}

// fn(T{}) with T the type `type` names.
template <class Fn>
void by_type(FloatType type, Fn fn) {
  switch (type) {
    case FloatType::kFloat32:
      fn(float{});
      break;
    case FloatType::kBFloat16:
      fn(__nv_bfloat16{});
      break;
    case FloatType::kFloat16:
      fn(__half{});
      break;
  }
}

}  // namespace gputrain::kernels
