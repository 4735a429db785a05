#include "util/device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <malloc.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#include <torch/cuda.h>

#include <cstdio>
#include <mutex>
#include <regex>
#include <thread>

#include "util/error.h"
#include "util/host_allocator.h"

namespace gputrain {

#ifndef GPUTRAIN_WITH_CUDA
// CPU-only build: the CUDA hooks are no-ops (device_cuda.cpp is not compiled).
bool cuda_build() { return false; }
void cuda_synchronize(int) {}
double cuda_peak_memory_mb(int) { return 0.0; }
int64_t cuda_allocated_bytes(int) { return 0; }
void cuda_reset_peak_memory(int) {}
std::string cuda_device_name(int) { return "cuda"; }
void cuda_empty_cache() {}
torch::Tensor cuda_rng_state(int) { return {}; }
void cuda_set_rng_state(int, const torch::Tensor&) {}
void cuda_set_device(int) {}
#else
void cuda_synchronize(int index);
double cuda_peak_memory_mb(int index);
int64_t cuda_allocated_bytes(int index);
void cuda_reset_peak_memory(int index);
std::string cuda_device_name(int index);
void cuda_empty_cache();
torch::Tensor cuda_rng_state(int index);
void cuda_set_rng_state(int index, const torch::Tensor& state);
void cuda_set_device(int index);
#endif

torch::Device resolve_device(const std::string& spec) {
  const bool have_cuda = torch::cuda::is_available();
  if (spec == "auto") return have_cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (spec == "cpu") return torch::kCPU;
  std::smatch m;
  static const std::regex cuda(R"(cuda(?::(\d+))?)");
  if (std::regex_match(spec, m, cuda)) {
    int index = m[1].matched ? std::stoi(m[1].str()) : 0;
    if (!have_cuda)
      throw usage_error("run.device is '" + spec + "' but no CUDA device is available here" +
                        (cuda_build() ? "" : " (this is a CPU-only build)") + "\n    fix: use run.device: auto or cpu");
    if (index >= static_cast<int>(torch::cuda::device_count()))
      throw usage_error("run.device is '" + spec + "' but only " + std::to_string(torch::cuda::device_count()) +
                        " CUDA device(s) are visible\n    fix: use cuda:0 .. cuda:" +
                        std::to_string(torch::cuda::device_count() - 1));
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  throw usage_error("run.device '" + spec + "' is not a device\n    fix: use auto, cpu, cuda or cuda:N");
}

int64_t resolve_threads(int64_t threads) {
  if (threads > 0) return threads;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string device_name(const torch::Device& d) { return d.is_cuda() ? cuda_device_name(d.index()) : "cpu"; }

void synchronize(const torch::Device& d) {
  if (d.is_cuda()) cuda_synchronize(d.index());
}

double peak_memory_mb(const torch::Device& d) {
  if (d.is_cuda()) return cuda_peak_memory_mb(d.index());
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

int64_t memory_in_use_bytes(const torch::Device& d) {
  if (d.is_cuda()) return cuda_allocated_bytes(d.index());
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);  // heap blocks in use + mmapped blocks
}

void reset_peak_memory(const torch::Device& d) {
  if (d.is_cuda()) cuda_reset_peak_memory(d.index());
}

double current_rss_mb() {
  long pages_total = 0, pages_resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

void release_cached_memory(const torch::Device& d) {
  if (d.is_cuda()) cuda_empty_cache();
  release_host_block_cache();
  malloc_trim(0);
}

RngSnapshot capture_rng(const torch::Device& d) {
  RngSnapshot s;
  auto gen = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.cpu = gen.get_state();
  }
  if (d.is_cuda()) s.cuda = cuda_rng_state(d.index()), s.cuda_index = d.index();
  return s;
}

void restore_rng(const RngSnapshot& s) {
  auto gen = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(s.cpu);
  }
  if (s.cuda.defined()) cuda_set_rng_state(s.cuda_index, s.cuda);
}

torch::Device device_for_local_rank(const torch::Device& d, int local_rank) {
  if (!d.is_cuda()) return d;
  torch::Device mine(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  cuda_set_device(local_rank);  // NCCL and the allocator use the current device
  return mine;
}

}  // namespace gputrain
