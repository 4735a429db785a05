#include "fused_adamw8bit.cuh"
#include "multi_tensor.cuh"

namespace gputrain::kernels {
namespace {

constexpr int kThreads = kQuantBlock;  // one thread per element of a quantization block
constexpr int kWarps = kThreads / 32;

// --- kernels -------------------------------------------------------------------

// The maximum of `x` over the block; every thread gets it. `scratch` holds kWarps floats.
__device__ __forceinline__ float block_max(float x, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from the previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = fmaxf(r, scratch[w]);
  return r;
}

template <ParamType kType>
__global__ void __launch_bounds__(kThreads)
    fused_adamw8bit_kernel(const FusedAdamW8bitTensor* tensors, int n_tensors, int64_t total_blocks,
                           const float* signed_code, const float* unsigned_code) {
  __shared__ float code_m[kQuantCodes], code_v[kQuantCodes], scratch[kWarps];
  for (int i = threadIdx.x; i < kQuantCodes; i += blockDim.x) {
    code_m[i] = signed_code[i];
    code_v[i] = unsigned_code[i];
  }
  __syncthreads();
  for (int64_t unit = blockIdx.x; unit < total_blocks; unit += gridDim.x) {
    const int ti = owner_of(tensors, n_tensors, unit, [](const FusedAdamW8bitTensor& t) { return t.first_block; });
    const FusedAdamW8bitTensor& t = tensors[ti];
    const int64_t block = unit - t.first_block;
    const int64_t i = block * kQuantBlock + threadIdx.x;
    const bool active = i < t.numel;
    float m = 0, v = 0;
    if (active) {
      m = code_m[t.exp_avg[i]] * t.absmax_avg[block];
      v = code_v[t.exp_avg_sq[i]] * t.absmax_avg_sq[block];
      if constexpr (kType == ParamType::kFloat32) {
        float* p = static_cast<float*>(t.param);
        p[i] = adamw_element(p[i], static_cast<const float*>(t.grad)[i], m, v, t.s);
      } else {
        uint16_t* p = static_cast<uint16_t*>(t.param);
        const float g = bf16_bits_to_float(static_cast<const uint16_t*>(t.grad)[i]);
        const float updated = adamw_element(bf16_bits_to_float(p[i]), g, m, v, t.s);
        p[i] = float_to_bf16_stochastic(updated, hash_bits(t.seed, static_cast<uint64_t>(i)));
      }
    }
    // Every thread has read the old absmax before block_max's first barrier.
    const float max_m = block_max(fabsf(m), scratch);
    const float max_v = block_max(v, scratch);
    if (threadIdx.x == 0) {
      t.absmax_avg[block] = max_m;
      t.absmax_avg_sq[block] = max_v;
    }
    if (active) {
      t.exp_avg[i] = quantize_nearest(code_m, max_m > 0 ? m / max_m : 0.0f);
      t.exp_avg_sq[i] = quantize_nearest(code_v, max_v > 0 ? v / max_v : 0.0f);
    }
    __syncthreads();  // the next unit's reads of scratch and codes
  }
}

}  // namespace

// --- launchers -----------------------------------------------------------------

void launch_fused_adamw8bit(const FusedAdamW8bitTensor* tensors, int n_tensors, int64_t total_blocks,
                            const float* signed_code, const float* unsigned_code, ParamType type, cudaStream_t stream) {
  if (n_tensors <= 0 || total_blocks <= 0) return;
  if (tensors == nullptr || signed_code == nullptr || unsigned_code == nullptr)
    throw std::runtime_error("launch_fused_adamw8bit: null table or quantization map");
  const unsigned grid = grid_for(total_blocks);
  if (type == ParamType::kFloat32)
    fused_adamw8bit_kernel<ParamType::kFloat32>
        <<<grid, kThreads, 0, stream>>>(tensors, n_tensors, total_blocks, signed_code, unsigned_code);
  else
    fused_adamw8bit_kernel<ParamType::kBFloat16>
        <<<grid, kThreads, 0, stream>>>(tensors, n_tensors, total_blocks, signed_code, unsigned_code);
  check_cuda(cudaGetLastError(), "launch_fused_adamw8bit");
}

}  // namespace gputrain::kernels
