#include "fused_adamw.cuh"
#include "multi_tensor.cuh"

namespace gputrain::kernels {
namespace {

constexpr int kThreads = 256;

// --- kernels -------------------------------------------------------------------

template <ParamType kType>
__global__ void fused_adamw_kernel(const FusedAdamWTensor* tensors, int n_tensors, int64_t total_chunks) {
  for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
    const int ti = owner_of(tensors, n_tensors, chunk, [](const FusedAdamWTensor& t) { return t.first_chunk; });
    const FusedAdamWTensor& t = tensors[ti];
    const int64_t begin = (chunk - t.first_chunk) * kAdamWChunk;
    const int64_t end = begin + kAdamWChunk < t.numel ? begin + kAdamWChunk : t.numel;
    const float scale = t.grad_scale ? *t.grad_scale : 1.0f;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float m = t.exp_avg[i], v = t.exp_avg_sq[i];
      if constexpr (kType == ParamType::kFloat32) {
        float* p = static_cast<float*>(t.param);
        const float g = static_cast<const float*>(t.grad)[i] * scale;
        const float updated = adamw_element(p[i], g, m, v, t.s);
        p[i] = updated;
        if (t.bf16_copy) t.bf16_copy[i] = float_to_bf16_nearest(updated);
      } else {
        uint16_t* p = static_cast<uint16_t*>(t.param);
        const float g = bf16_bits_to_float(static_cast<const uint16_t*>(t.grad)[i]) * scale;
        const float updated = adamw_element(bf16_bits_to_float(p[i]), g, m, v, t.s);
        p[i] = float_to_bf16_stochastic(updated, hash_bits(t.seed, static_cast<uint64_t>(i)));
      }
      t.exp_avg[i] = m;
      t.exp_avg_sq[i] = v;
    }
  }
}

}  // namespace

// --- launchers -----------------------------------------------------------------

void launch_fused_adamw(const FusedAdamWTensor* tensors, int n_tensors, int64_t total_chunks, ParamType type,
                        cudaStream_t stream) {
  if (n_tensors <= 0 || total_chunks <= 0) return;
  if (tensors == nullptr) throw std::runtime_error("launch_fused_adamw: null tensor table");
  const unsigned grid = grid_for(total_chunks);
  if (type == ParamType::kFloat32)
    fused_adamw_kernel<ParamType::kFloat32><<<grid, kThreads, 0, stream>>>(tensors, n_tensors, total_chunks);
  else fused_adamw_kernel<ParamType::kBFloat16><<<grid, kThreads, 0, stream>>>(tensors, n_tensors, total_chunks);
  check_cuda(cudaGetLastError(), "launch_fused_adamw");
}

}  // namespace gputrain::kernels
