// Comparing runs step by step (both test suites): the small recipe they share, and their
// metrics.jsonl read as columns.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace gputrain::test {

// Real text, no dropout: 1 and N processes must see the same numbers.
std::string dp_recipe();

// One key of every metrics.jsonl line (NaN where it is null: a skipped step's gradient norm).
std::vector<double> column(const std::string& out, const char* key);

// The largest difference over the first `steps` steps (0: all); NaN on both sides counts as equal,
// on one side as infinite.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, size_t steps = 0);

}  // namespace gputrain::test
