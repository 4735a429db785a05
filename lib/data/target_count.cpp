#include "data/target_count.h"

#include <algorithm>

namespace gputrain {

double inverse_target_count(const std::vector<Batch>& micro_batches, int64_t total_targets) {
  int64_t total = total_targets;
  if (total == 0)
    for (const auto& b : micro_batches) total += b.target_count;
  return 1.0 / static_cast<double>(std::max<int64_t>(total, 1));
}

}  // namespace gputrain
