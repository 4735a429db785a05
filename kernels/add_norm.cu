#include "add_norm.cuh"
#include "float_convert.cuh"
#include "multi_tensor.cuh"

namespace gputrain::kernels {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int64_t kBackwardBlocks = 512;  // fixed: the partial sums' row count, device-independent

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// --- kernels -------------------------------------------------------------------

// One warp per row; lane l holds columns l, l + 32, ... (kPer of them), so
// each load instruction of a warp reads consecutive elements. Column indices
// are 32-bit (width <= kMaxAddNormWidth): with 64-bit ones the backward
// spilled registers at d 768. Loads and
// stores sit in separate loops: the compiler may not move a load past a
// store to memory that could alias it, so a loop that mixed them would wait
// out one memory latency per element instead of one per loop.
template <class TR, class TB, class TO, int kPer>
__global__ void __launch_bounds__(kThreads) add_norm_forward_kernel(AddNormForwardArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d = static_cast<int>(a.width);
  const TR* weight = static_cast<const TR*>(a.weight);
  const TR* bias = static_cast<const TR*>(a.bias);
  const float inv_d = 1.0f / static_cast<float>(d);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp; r < a.rows;
       r += static_cast<int64_t>(gridDim.x) * kWarps) {
    const TR* x = static_cast<const TR*>(a.x) + r * d;
    float v[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = lane + 32 * i;
      v[i] = c < d ? to_float(x[c]) : 0.0f;
    }
    if (a.branch) {
      const TB* branch = static_cast<const TB*>(a.branch) + r * d;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = lane + 32 * i;
        if (c < d) v[i] += to_float(branch[c]);
      }
      // The sum is rounded to the stream's type before it is normalized, as ATen's add then norm do.
      TR* sum = static_cast<TR*>(a.sum) + r * d;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = lane + 32 * i;
        if (c < d) {
          const TR s = from_float<TR>(v[i]);
          sum[c] = s;
          v[i] = to_float(s);
        }
      }
    }
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) total += v[i];  // columns past d hold 0
    const float mean = a.rms ? 0.0f : warp_sum(total) * inv_d;
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = lane + 32 * i;
      if (c < d) sq += (v[i] - mean) * (v[i] - mean);
    }
    const float rstd = rsqrtf(warp_sum(sq) * inv_d + a.eps);
    if (lane == 0) {
      if (a.mean) a.mean[r] = mean;
      a.rstd[r] = rstd;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = lane + 32 * i;
      if (c < d) v[i] = (v[i] - mean) * rstd * to_float(weight[c]) + (bias ? to_float(bias[c]) : 0.0f);
    }
    TO* out = static_cast<TO*>(a.out) + r * d;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = lane + 32 * i;
      if (c < d) out[c] = from_float<TO>(v[i]);
    }
  }
}

// Whether the backward's second pass reloads its input (the warp read it a
// moment ago: L1 or L2) rather than keep xhat in registers: where keeping it
// would spill (ptxas -v; scripts/kernel_resources.py prints it). Past 32
// columns per lane the accumulators, g and xhat exceed the 255 registers a
// thread has; at 24, capped at 128 for two blocks per multiprocessor, they fit
// sm_90's schedule but not sm_80's.
template <int kPer>
__device__ constexpr bool backward_reloads_input() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  if (kPer == 24) return true;
#endif
  return kPer > 32;
}

// d input = rstd * (g - mean(g) - xhat * mean(g * xhat)) + grad_sum, with
// g = grad_out * weight and xhat the normalized input (RMSNorm: no mean(g)
// term). Each lane accumulates its columns' weight/bias gradients over the
// rows its warp visits; the block then adds its 8 warps' sums into one
// partial row (shared memory, a fixed order). Up to 24 columns per lane the
// registers fit two blocks per multiprocessor (d 768: 128 registers).
template <class TR, class TB, class TO, int kPer>
__global__ void __launch_bounds__(kThreads, kPer <= 24 ? 2 : 1) add_norm_backward_kernel(AddNormBackwardArgs a) {
  constexpr bool kReloadInput = backward_reloads_input<kPer>();
  __shared__ float staged[kWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d = static_cast<int>(a.width);
  const TR* weight = static_cast<const TR*>(a.weight);
  const float inv_d = 1.0f / static_cast<float>(d);
  float weight_acc[kPer], bias_acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) weight_acc[i] = bias_acc[i] = 0.0f;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp; r < a.rows;
       r += static_cast<int64_t>(gridDim.x) * kWarps) {
    const TO* grad_out = static_cast<const TO*>(a.grad_out) + r * d;
    const TR* input = static_cast<const TR*>(a.input) + r * d;
    const float mean = a.rms ? 0.0f : a.mean[r], rstd = a.rstd[r];
    // The one expression both passes use, so a reloaded xhat equals the kept one bit for bit.
    const auto normalized = [&](int c) { return (to_float(input[c]) - mean) * rstd; };
    float g[kPer], xhat[kPer];
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = lane + 32 * i;
      g[i] = xhat[i] = 0.0f;
      if (c < d) {
        const float dy = to_float(grad_out[c]);
        xhat[i] = normalized(c);
        g[i] = dy * to_float(weight[c]);
        sum_g += g[i];
        sum_gx += g[i] * xhat[i];
        weight_acc[i] += dy * xhat[i];
        bias_acc[i] += dy;
      }
    }
    const float mean_g = a.rms ? 0.0f : warp_sum(sum_g) * inv_d;
    const float mean_gx = warp_sum(sum_gx) * inv_d;
    // g becomes d input; then the residual path's gradient is loaded (loads only), then stored.
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = lane + 32 * i;
      const float x = kReloadInput ? (c < d ? normalized(c) : 0.0f) : xhat[i];
      g[i] = rstd * (g[i] - mean_g - x * mean_gx);
    }
    if (a.grad_sum) {
      const TR* grad_sum = static_cast<const TR*>(a.grad_sum) + r * d;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = lane + 32 * i;
        if (c < d) g[i] += to_float(grad_sum[c]);
      }
    }
    TR* grad_input = static_cast<TR*>(a.grad_input) + r * d;
    TB* grad_branch = a.grad_branch ? static_cast<TB*>(a.grad_branch) + r * d : nullptr;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = lane + 32 * i;
      if (c < d) {
        grad_input[c] = from_float<TR>(g[i]);
        if (grad_branch) grad_branch[c] = from_float<TB>(g[i]);
      }
    }
  }
  float* partials[2] = {a.weight_partial, a.bias_partial};
#pragma unroll
  for (int which = 0; which < 2; ++which) {
    if (!partials[which]) continue;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      staged[warp][lane] = which == 0 ? weight_acc[i] : bias_acc[i];
      __syncthreads();
      const int c = lane + 32 * i;
      if (warp == 0 && c < d) {
        float t = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) t += staged[w][lane];
        partials[which][blockIdx.x * d + c] = t;
      }
      __syncthreads();
    }
  }
}

// fn(TR{}, TB{}, TO{}) for a supported combination; false otherwise.
template <class Fn>
bool by_types(FloatType r, FloatType b, FloatType o, Fn fn) {
  using F = FloatType;
  using bf16 = __nv_bfloat16;
  if (r == F::kFloat32 && b == F::kFloat32 && o == F::kFloat32) fn(float{}, float{}, float{});
  else if (r == F::kFloat32 && b == F::kBFloat16 && o == F::kBFloat16) fn(float{}, bf16{}, bf16{});
  else if (r == F::kFloat32 && b == F::kFloat16 && o == F::kFloat16) fn(float{}, __half{}, __half{});
  else if (r == F::kFloat32 && b == F::kFloat32 && o == F::kBFloat16) fn(float{}, float{}, bf16{});
  else if (r == F::kFloat32 && b == F::kFloat32 && o == F::kFloat16) fn(float{}, float{}, __half{});
  else if (r == F::kBFloat16 && b == F::kBFloat16 && o == F::kBFloat16) fn(bf16{}, bf16{}, bf16{});
  else if (r == F::kFloat16 && b == F::kFloat16 && o == F::kFloat16) fn(__half{}, __half{}, __half{});
  else return false;
  return true;
}

// fn(std::integral_constant<int, kPer>) with kPer * 32 >= width.
template <class Fn>
void by_width(int64_t width, Fn fn) {
  if (width <= 256) fn(std::integral_constant<int, 8>{});
  else if (width <= 512) fn(std::integral_constant<int, 16>{});
  else if (width <= 768) fn(std::integral_constant<int, 24>{});
  else if (width <= 1024) fn(std::integral_constant<int, 32>{});
  else if (width <= 1536) fn(std::integral_constant<int, 48>{});
  else fn(std::integral_constant<int, 64>{});
}

}  // namespace

bool add_norm_supported(FloatType residual, FloatType branch, FloatType out, int64_t width) {
  return width >= 1 && width <= kMaxAddNormWidth && by_types(residual, branch, out, [](auto, auto, auto) {});
}

int64_t add_norm_backward_blocks(int64_t rows) {
  const int64_t needed = (rows + kWarps - 1) / kWarps;
  return needed < kBackwardBlocks ? needed : kBackwardBlocks;
}

// --- launchers -----------------------------------------------------------------

void launch_add_norm_forward(const AddNormForwardArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return;
  if (!add_norm_supported(a.residual, a.branch_type, a.out_type, a.width) || !a.x || !a.out || !a.weight || !a.rstd ||
      (!a.rms && !a.mean) || (a.branch && !a.sum) || (a.rms && a.bias))
    throw std::runtime_error("launch_add_norm_forward: bad arguments");
  by_types(a.residual, a.branch_type, a.out_type, [&](auto r, auto b, auto o) {
    by_width(a.width, [&](auto per) {
      add_norm_forward_kernel<decltype(r), decltype(b), decltype(o), decltype(per)::value>
          <<<grid_for((a.rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(a);
    });
  });
  check_cuda(cudaGetLastError(), "launch_add_norm_forward");
}

void launch_add_norm_backward(const AddNormBackwardArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return;
  if (!add_norm_supported(a.residual, a.branch_type, a.out_type, a.width) || !a.grad_out || !a.input || !a.weight ||
      !a.rstd || (!a.rms && !a.mean) || !a.grad_input || !a.weight_partial)
    throw std::runtime_error("launch_add_norm_backward: bad arguments");
  by_types(a.residual, a.branch_type, a.out_type, [&](auto r, auto b, auto o) {
    by_width(a.width, [&](auto per) {
      add_norm_backward_kernel<decltype(r), decltype(b), decltype(o), decltype(per)::value>
          <<<static_cast<unsigned>(add_norm_backward_blocks(a.rows)), kThreads, 0, stream>>>(a);
    });
  });
  check_cuda(cudaGetLastError(), "launch_add_norm_backward");
}

}  // namespace gputrain::kernels
