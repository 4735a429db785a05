// Device selection and the few device facts the trainer reports. CUDA-only
// LibTorch calls live in device_cuda.cpp, compiled only in the CUDA build.
#pragma once
#include <torch/types.h>

#include <string>

namespace gputrain {

// "auto" -> cuda:0 when LibTorch sees a GPU, else cpu. Throws a usage Error
// when CUDA is asked for and not available.
torch::Device resolve_device(const std::string& spec);
// run.threads: 0 = the cores this process may run on.
int64_t resolve_threads(int64_t threads);

// One GPU per local rank: cuda:<local_rank>, made the current device. CPU stays CPU.
torch::Device device_for_local_rank(const torch::Device& d, int local_rank);

bool cuda_build();
std::string device_name(const torch::Device& d);
void synchronize(const torch::Device& d);
// Peak memory since the last reset, in MiB: the caching allocator's peak on
// CUDA, the process's peak resident set on CPU (which cannot be reset).
double peak_memory_mb(const torch::Device& d);
void reset_peak_memory(const torch::Device& d);
// Bytes allocated now: the CUDA caching allocator's tensors, or malloc's
// blocks in use on CPU (mallinfo2: unlike the resident set it falls when
// memory is freed, so a peak over a stretch of code can be measured).
int64_t memory_in_use_bytes(const torch::Device& d);
// The process's resident memory now, in MiB (/proc/self/statm).
double current_rss_mb();
// Hands cached free memory back: the CUDA caching allocator's blocks, or
// malloc's free pages on CPU (train.empty_cache_steps).
void release_cached_memory(const torch::Device& d);

// The default generators' states (CPU, and the device's CUDA generator), so
// a recomputation can replay the same random numbers (dropout).
struct RngSnapshot {
  torch::Tensor cpu, cuda;
  int cuda_index = -1;
};
RngSnapshot capture_rng(const torch::Device& d);
void restore_rng(const RngSnapshot& s);

}  // namespace gputrain
