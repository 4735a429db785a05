// Comparing runs step by step (both test suites): the small recipe they share, and their
// metrics.jsonl read as columns.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace gputrain::test {

// Real text, no dropout: 1 and N processes must see the same numbers.
std::string dp_recipe();

// The bound for runs whose float32 sums meet in another order than one process's (tensor parallelism's
// partial sums, a pipeline's stages, experts on their holders): every such variant agreed to the metrics'
// rounding (1e-6) over its 20 steps here (2026-12-08; the bound was 1e-4); 2e-5 leaves room for another
// CPU's vector width (data parallelism's fp16 run parts by 1.7e-5 on an AVX-512 machine).
inline constexpr double kReorderedSums = 2e-5;

// One key of every metrics.jsonl line (NaN where it is null: a skipped step's gradient norm).
std::vector<double> column(const std::string& out, const char* key);

// The largest difference over the first `steps` steps (0: all); NaN on both sides counts as equal,
// on one side as infinite.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, size_t steps = 0);

}  // namespace gputrain::test
