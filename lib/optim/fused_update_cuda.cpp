// The CUDA halves of the fused updates: a table of tensors (pointers, sizes,
// per-tensor scalars) built on the host, copied to the device asynchronously
// from pinned memory, and one kernel launch for the whole list.
#include <ATen/cuda/CUDAContext.h>

#include <cstring>

#include "fused_adamw.cuh"
#include "fused_adamw8bit.cuh"
#include "optim/fused_update.h"

namespace gputrain {
namespace {

kernels::ParamType param_type(const at::Tensor& p) {
  return p.scalar_type() == at::kBFloat16 ? kernels::ParamType::kBFloat16 : kernels::ParamType::kFloat32;
}

// The table in device memory. The pinned staging buffer is released to
// LibTorch's caching host allocator, which keeps it until the copy has run.
template <class Entry>
at::Tensor table_on_device(const std::vector<Entry>& table, const at::Device& device) {
  const auto bytes = static_cast<int64_t>(table.size() * sizeof(Entry));
  at::Tensor host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(host.data_ptr(), table.data(), static_cast<size_t>(bytes));
  return host.to(device, /*non_blocking=*/true);
}

}  // namespace

void fused_adamw_cuda(const std::vector<FusedAdamWItem>& items) {
  if (items.empty()) return;
  std::vector<kernels::FusedAdamWTensor> table;
  int64_t chunks = 0;
  for (const auto& it : items) {
    table.push_back({it.param.data_ptr(), it.grad.data_ptr(), it.exp_avg.data_ptr<float>(),
                     it.exp_avg_sq.data_ptr<float>(), it.param.numel(), chunks, it.seed, it.scalars,
                     it.grad_scale.defined() ? it.grad_scale.data_ptr<float>() : nullptr,
                     it.bf16_copy.defined() ? static_cast<uint16_t*>(it.bf16_copy.data_ptr()) : nullptr});
    chunks += (it.param.numel() + kernels::kAdamWChunk - 1) / kernels::kAdamWChunk;
  }
  const at::Device device = items.front().param.device();
  at::Tensor dev = table_on_device(table, device);
  kernels::launch_fused_adamw(reinterpret_cast<const kernels::FusedAdamWTensor*>(dev.data_ptr()),
                              static_cast<int>(table.size()), chunks, param_type(items.front().param),
                              at::cuda::getCurrentCUDAStream(device.index()).stream());
}

void fused_adamw8bit_cuda(const std::vector<FusedAdamW8bitItem>& items, const QuantMaps& maps) {
  if (items.empty()) return;
  std::vector<kernels::FusedAdamW8bitTensor> table;
  int64_t blocks = 0;
  for (const auto& it : items) {
    table.push_back({it.param.data_ptr(), it.grad.data_ptr(), it.exp_avg.data_ptr<uint8_t>(),
                     it.exp_avg_sq.data_ptr<uint8_t>(), it.absmax_avg.data_ptr<float>(),
                     it.absmax_avg_sq.data_ptr<float>(), it.param.numel(), blocks, it.seed, it.scalars});
    blocks += (it.param.numel() + kernels::kQuantBlock - 1) / kernels::kQuantBlock;
  }
  const at::Device device = items.front().param.device();
  at::Tensor dev = table_on_device(table, device);
  kernels::launch_fused_adamw8bit(reinterpret_cast<const kernels::FusedAdamW8bitTensor*>(dev.data_ptr()),
                                  static_cast<int>(table.size()), blocks, maps.signed_code.data_ptr<float>(),
                                  maps.unsigned_code.data_ptr<float>(), param_type(items.front().param),
                                  at::cuda::getCurrentCUDAStream(device.index()).stream());
}

}  // namespace gputrain
