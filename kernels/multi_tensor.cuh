// Helpers of the multi-tensor kernels: a table of tensors in device memory,
// work units (chunks or blocks) numbered across all of them, and a CUDA
// error check for launchers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace gputrain::kernels {

// Index of the tensor that owns work unit `unit`: the last entry whose
// `first` member is <= unit (entries sorted by it). O(log n) per block.
template <class Entry, class FirstOf>
__device__ __forceinline__ int owner_of(const Entry* table, int n, int64_t unit, FirstOf first_of) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_of(table[mid]) <= unit) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Grid size for a grid-stride loop over `units` blocks.
inline unsigned grid_for(int64_t units) {
  constexpr int64_t kMaxGrid = 1 << 30;
  return static_cast<unsigned>(units < kMaxGrid ? units : kMaxGrid);
}

}  // namespace gputrain::kernels
