// `gputrain kernels bench`: each fused CUDA kernel against the ATen ops it
// replaces, forward + backward at the recipe's shapes (per_device_batch_size
// x seq_len rows, d_model, the padded vocabulary) and precision, on its CUDA
// device. A table for docs/benchmarks.md, not a test (DESIGN rule 10).
#pragma once
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

struct KernelBenchRow {
  std::string op;      // what is computed
  std::string shape;   // [rows, width] and dtypes
  double aten_ms = 0;  // ATen's ops, forward + backward
  double fused_ms = 0;
  double fused_gb_per_s = 0;  // the bytes the fused kernels must move, over their time
};

struct KernelBenchResult {
  std::string device;
  std::vector<KernelBenchRow> rows;
};

// Throws a usage Error when the recipe's device is not a CUDA device or the
// build has no CUDA kernels.
KernelBenchResult bench_kernels(const Settings& s, int64_t repeats);
std::string kernel_bench_table(const KernelBenchResult& r);

}  // namespace gputrain
