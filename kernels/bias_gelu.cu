#include "bias_gelu.cuh"
#include "float_convert.cuh"
#include "multi_tensor.cuh"

namespace gputrain::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kChunks = 256;  // row chunks of the backward: the partial sums' row count
constexpr int kRowsInFlight = 4;

constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;

__device__ __forceinline__ float gelu(float z) {
  return 0.5f * z * (1.0f + tanhf(kSqrt2OverPi * (z + kCubic * z * z * z)));
}

__device__ __forceinline__ float gelu_grad(float z) {
  const float t = tanhf(kSqrt2OverPi * (z + kCubic * z * z * z));
  return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * z * z);
}

template <class T>
struct Vec {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

template <class T>
__device__ __forceinline__ Vec<T> load(const T* p) {
  Vec<T> r;
  *reinterpret_cast<uint4*>(r.v) = *reinterpret_cast<const uint4*>(p);
  return r;
}

template <class T>
__device__ __forceinline__ void store(T* p, const Vec<T>& r) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(r.v);
}

// The bias of the kN columns starting at `col`, in fp32 (both kernels add it to y).
template <class TBias, int kN>
__device__ __forceinline__ void load_bias(const BiasGeluArgs& a, int64_t col, float (&b)[kN]) {
  const TBias* bias = static_cast<const TBias*>(a.bias) + col;
#pragma unroll
  for (int k = 0; k < kN; ++k) b[k] = to_float(bias[k]);
}

// --- kernels -------------------------------------------------------------------

// Thread x of block (bx, by) owns the kN columns starting at (bx * kThreads + x) * kN
// and walks the rows of chunk by (one chunk per grid row).
template <class T, class TBias>
__global__ void __launch_bounds__(kThreads) bias_gelu_forward_kernel(BiasGeluArgs a, T* out, int64_t rows_per_chunk) {
  constexpr int kN = Vec<T>::kN;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kN;
  if (col >= a.width) return;
  float b[kN];
  load_bias<TBias>(a, col, b);
  const int64_t chunk = blockIdx.y, end = min(a.rows, (chunk + 1) * rows_per_chunk);
  // kRowsInFlight rows' loads are issued before the first is used.
  for (int64_t r0 = chunk * rows_per_chunk; r0 < end; r0 += kRowsInFlight) {
    Vec<T> y[kRowsInFlight];
#pragma unroll
    for (int i = 0; i < kRowsInFlight; ++i)
      if (r0 + i < end) y[i] = load(static_cast<const T*>(a.y) + (r0 + i) * a.width + col);
#pragma unroll
    for (int i = 0; i < kRowsInFlight; ++i) {
      if (r0 + i >= end) break;
      Vec<T> o;
#pragma unroll
      for (int k = 0; k < kN; ++k) o.v[k] = from_float<T>(gelu(to_float(y[i].v[k]) + b[k]));
      store(out + (r0 + i) * a.width + col, o);
    }
  }
}

template <class T, class TBias>
__global__ void __launch_bounds__(kThreads) bias_gelu_backward_kernel(BiasGeluArgs a, const T* grad_out, T* grad_y,
                                                                      float* bias_partial, int64_t rows_per_chunk) {
  constexpr int kN = Vec<T>::kN;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kN;
  if (col >= a.width) return;
  float b[kN];
  load_bias<TBias>(a, col, b);
  const int64_t chunk = blockIdx.y;  // one chunk per grid row: the partial row it writes
  const int64_t end = min(a.rows, (chunk + 1) * rows_per_chunk);
  float acc[kN];
#pragma unroll
  for (int k = 0; k < kN; ++k) acc[k] = 0.0f;
  for (int64_t r0 = chunk * rows_per_chunk; r0 < end; r0 += kRowsInFlight) {
    Vec<T> y[kRowsInFlight], g[kRowsInFlight];
#pragma unroll
    for (int i = 0; i < kRowsInFlight; ++i)
      if (r0 + i < end) {
        y[i] = load(static_cast<const T*>(a.y) + (r0 + i) * a.width + col);
        g[i] = load(grad_out + (r0 + i) * a.width + col);
      }
#pragma unroll
    for (int i = 0; i < kRowsInFlight; ++i) {
      if (r0 + i >= end) break;
      Vec<T> d;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const T rounded = from_float<T>(to_float(g[i].v[k]) * gelu_grad(to_float(y[i].v[k]) + b[k]));
        d.v[k] = rounded;
        acc[k] += to_float(rounded);  // the bias gradient sums the stored d y, as ATen's reduction would
      }
      store(grad_y + (r0 + i) * a.width + col, d);
    }
  }
#pragma unroll
  for (int k = 0; k < kN; ++k) bias_partial[chunk * a.width + col + k] = acc[k];
}

// fn(T{}, TBias{}) for a supported pair; false otherwise.
template <class Fn>
bool by_types(FloatType y, FloatType bias, Fn fn) {
  bool found = false;
  by_type(y, [&](auto t) {
    using T = decltype(t);
    if (bias == FloatType::kFloat32) {
      fn(t, float{});
      found = true;
    } else if (bias == y) {
      fn(t, T{});
      found = true;
    }
  });
  return found;
}

int vector_width(FloatType t) { return t == FloatType::kFloat32 ? 4 : 8; }

dim3 grid_of(const BiasGeluArgs& a, int64_t chunks) {
  const int64_t columns = a.width / vector_width(a.y_type);
  return dim3(static_cast<unsigned>((columns + kThreads - 1) / kThreads), static_cast<unsigned>(chunks));
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool bias_gelu_supported(FloatType y, FloatType bias, int64_t width) {
  return width > 0 && width % vector_width(y) == 0 && (bias == FloatType::kFloat32 || bias == y);
}

int64_t bias_gelu_backward_chunks(int64_t rows) { return rows < kChunks ? rows : kChunks; }

// --- launchers -----------------------------------------------------------------

void launch_bias_gelu_forward(const BiasGeluArgs& a, void* out, cudaStream_t stream) {
  if (a.rows <= 0) return;
  if (!bias_gelu_supported(a.y_type, a.bias_type, a.width) || !a.y || !a.bias || !out || !aligned(a.y) || !aligned(out))
    throw std::runtime_error("launch_bias_gelu_forward: bad arguments");
  const int64_t chunks = bias_gelu_backward_chunks(a.rows), per_chunk = (a.rows + chunks - 1) / chunks;
  by_types(a.y_type, a.bias_type, [&](auto t, auto b) {
    using T = decltype(t);
    bias_gelu_forward_kernel<T, decltype(b)>
        <<<grid_of(a, chunks), kThreads, 0, stream>>>(a, static_cast<T*>(out), per_chunk);
  });
  check_cuda(cudaGetLastError(), "launch_bias_gelu_forward");
}

void launch_bias_gelu_backward(const BiasGeluArgs& a, const void* grad_out, void* grad_y, float* bias_partial,
                               cudaStream_t stream) {
  if (a.rows <= 0) return;
  if (!bias_gelu_supported(a.y_type, a.bias_type, a.width) || !a.y || !a.bias || !grad_out || !grad_y ||
      !bias_partial || !aligned(a.y) || !aligned(grad_out) || !aligned(grad_y))
    throw std::runtime_error("launch_bias_gelu_backward: bad arguments");
  const int64_t chunks = bias_gelu_backward_chunks(a.rows), per_chunk = (a.rows + chunks - 1) / chunks;
  by_types(a.y_type, a.bias_type, [&](auto t, auto b) {
    using T = decltype(t);
    bias_gelu_backward_kernel<T, decltype(b)><<<grid_of(a, chunks), kThreads, 0, stream>>>(
        a, static_cast<const T*>(grad_out), static_cast<T*>(grad_y), bias_partial, per_chunk);
  });
  check_cuda(cudaGetLastError(), "launch_bias_gelu_backward");
}

}  // namespace gputrain::kernels
