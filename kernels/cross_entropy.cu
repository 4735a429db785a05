#include <cfloat>

#include "cross_entropy.cuh"
#include "float_convert.cuh"
#include "multi_tensor.cuh"

namespace gputrain::kernels {
namespace {

constexpr int kThreads = 512;

// 16-byte vectors: 8 bf16/fp16 or 4 fp32 values per load.
template <class T>
struct Vec {
  static constexpr int kN = 16 / sizeof(T);
};

// Online softmax state: running max m and sum s of exp(x - m).
__device__ __forceinline__ void online_add(float& m, float& s, float x) {
  if (x > m) {
    s = s * __expf(m - x) + 1.0f;
    m = x;
  } else {
    s += __expf(x - m);
  }
}

__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
  if (m2 > m) {
    s = s * __expf(m - m2) + s2;
    m = m2;
  } else if (m2 != -FLT_MAX || s2 != 0.0f) {
    s += s2 * __expf(m2 - m);
  }
}

// --- kernels -------------------------------------------------------------------

// One block per row. Vector loads where the row is 16-byte aligned and the
// vocabulary a multiple of the vector width; element loads otherwise.
template <class T>
__global__ void cross_entropy_forward_kernel(CrossEntropyArgs a, float* lse, float* loss) {
  constexpr int kN = Vec<T>::kN;
  __shared__ float sm[kThreads / 32], ss[kThreads / 32];
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* row = static_cast<const T*>(a.logits) + r * a.row_stride;
    float m = -FLT_MAX, s = 0.0f;
    const bool vec = a.vocab % kN == 0 && (reinterpret_cast<uintptr_t>(row) % 16) == 0;
    if (vec) {
      const uint4* v = reinterpret_cast<const uint4*>(row);
      for (int64_t i = threadIdx.x; i < a.vocab / kN; i += blockDim.x) {
        uint4 bits = v[i];
        const T* x = reinterpret_cast<const T*>(&bits);
#pragma unroll
        for (int k = 0; k < kN; ++k) online_add(m, s, to_float(x[k]));
      }
    } else {
      for (int64_t j = threadIdx.x; j < a.vocab; j += blockDim.x) online_add(m, s, to_float(row[j]));
    }
    // Warp, then block reduction of (m, s).
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
      online_merge(m, s, m2, s2);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
      sm[warp] = m;
      ss[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
      m = lane < kThreads / 32 ? sm[lane] : -FLT_MAX;
      s = lane < kThreads / 32 ? ss[lane] : 0.0f;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
        online_merge(m, s, m2, s2);
      }
      if (lane == 0) {
        const float l = m + __logf(s);
        lse[r] = l;
        const int64_t t = a.targets[r];
        // A target outside the vocabulary gives NaN (the NaN guard names the step) rather than a stray read.
        loss[r] = t == a.ignore_index       ? 0.0f
                  : (t < 0 || t >= a.vocab) ? __int_as_float(0x7fc00000)
                                            : l - to_float(row[t]);
      }
    }
    __syncthreads();  // sm/ss are reused by the next row
  }
}

template <class T>
__global__ void cross_entropy_backward_kernel(CrossEntropyArgs a, const float* lse, const float* grad_scale, T* grad,
                                              int64_t grad_row_stride) {
  constexpr int kN = Vec<T>::kN;
  const float g = *grad_scale;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* row = static_cast<const T*>(a.logits) + r * a.row_stride;
    T* out = grad + r * grad_row_stride;  // may be `row` itself: each element is read, then written, by one thread
    const int64_t t = a.targets[r];
    const bool ignored = t == a.ignore_index;
    const float l = lse[r], scale = ignored ? 0.0f : g;
    const bool vec = a.vocab % kN == 0 && (reinterpret_cast<uintptr_t>(row) % 16) == 0 &&
                     (reinterpret_cast<uintptr_t>(out) % 16) == 0;
    if (vec) {
      const uint4* v = reinterpret_cast<const uint4*>(row);
      uint4* o = reinterpret_cast<uint4*>(out);
      for (int64_t i = threadIdx.x; i < a.vocab / kN; i += blockDim.x) {
        uint4 bits = v[i], result;
        const T* x = reinterpret_cast<const T*>(&bits);
        T* y = reinterpret_cast<T*>(&result);
#pragma unroll
        for (int k = 0; k < kN; ++k) {
          const int64_t j = i * kN + k;
          y[k] = from_float<T>((__expf(to_float(x[k]) - l) - (j == t ? 1.0f : 0.0f)) * scale);
        }
        o[i] = result;
      }
    } else {
      for (int64_t j = threadIdx.x; j < a.vocab; j += blockDim.x)
        out[j] = from_float<T>((__expf(to_float(row[j]) - l) - (j == t ? 1.0f : 0.0f)) * scale);
    }
  }
}

}  // namespace

// --- launchers -----------------------------------------------------------------

void launch_cross_entropy_forward(const CrossEntropyArgs& a, float* lse, float* loss, cudaStream_t stream) {
  if (a.rows <= 0) return;
  if (a.vocab <= 0 || a.row_stride < a.vocab || !a.logits || !a.targets || !lse || !loss)
    throw std::runtime_error("launch_cross_entropy_forward: bad arguments");
  by_type(a.type, [&](auto zero) {
    using T = decltype(zero);
    cross_entropy_forward_kernel<T><<<grid_for(a.rows), kThreads, 0, stream>>>(a, lse, loss);
  });
  check_cuda(cudaGetLastError(), "launch_cross_entropy_forward");
}

void launch_cross_entropy_backward(const CrossEntropyArgs& a, const float* lse, const float* grad_scale, void* grad,
                                   int64_t grad_row_stride, cudaStream_t stream) {
  if (a.rows <= 0) return;
  if (a.vocab <= 0 || a.row_stride < a.vocab || grad_row_stride < a.vocab || !a.logits || !a.targets || !lse ||
      !grad_scale || !grad || (grad == a.logits && grad_row_stride != a.row_stride))
    throw std::runtime_error("launch_cross_entropy_backward: bad arguments");
  by_type(a.type, [&](auto zero) {
    using T = decltype(zero);
    cross_entropy_backward_kernel<T>
        <<<grid_for(a.rows), kThreads, 0, stream>>>(a, lse, grad_scale, static_cast<T*>(grad), grad_row_stride);
  });
  check_cuda(cudaGetLastError(), "launch_cross_entropy_backward");
}

}  // namespace gputrain::kernels
