// CUDA-only device hooks (compiled only when GPUTRAIN_WITH_CUDA): the caching
// allocator's statistics, stream synchronization, the device's name.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <mutex>
#include <string>

namespace gputrain {

bool cuda_build() { return true; }

void cuda_synchronize(int index) { c10::cuda::device_synchronize(), (void)index; }

double cuda_peak_memory_mb(int index) {
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0);  // [0] = aggregate
}

int64_t cuda_allocated_bytes(int index) {
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[0].current;
}

void cuda_reset_peak_memory(int index) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

void cuda_empty_cache() {
  c10::cuda::CUDACachingAllocator::emptyCache();
  at::getHostAllocator(at::kCUDA)->empty_cache();  // the pinned host blocks it keeps for reuse too
}

torch::Tensor cuda_rng_state(int index) {
  auto gen = at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(index));
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void cuda_set_rng_state(int index, const torch::Tensor& state) {
  auto gen = at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(index));
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

void cuda_set_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

std::string cuda_device_name(int index) {
  return at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index))->name;
}

}  // namespace gputrain
