#include "metric_columns.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "test_util.h"

namespace gputrain::test {

std::vector<double> column(const std::string& out, const char* key) {
  std::vector<double> v;
  for (const auto& r : read_jsonl(out + "/metrics.jsonl"))
    v.push_back(r[key].is_null() ? std::nan("") : r[key].get<double>());
  return v;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, size_t steps) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && (steps == 0 || i < steps); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {  // a skipped step's gradient norm: skipped on both sides
      if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
      continue;
    }
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

}  // namespace gputrain::test
