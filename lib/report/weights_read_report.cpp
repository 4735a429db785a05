#include "report/weights_read_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "parallel/process_groups.h"

namespace gputrain {

std::string weights_read_line(const ProcessGroups& groups, uint64_t bytes_read, uint64_t bytes_stored,
                              const std::string& where) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const bool many = groups.distributed();
  // Each rank fills its own slot; the sum hands every rank the whole list.
  std::vector<double> read(static_cast<size_t>(many ? groups.world().size : 1), 0.0);
  read[static_cast<size_t>(many ? groups.world().rank : 0)] = static_cast<double>(bytes_read);
  read = groups.sum_over_world(read, "the bytes of weights each rank read");
  const std::string of =
      fmt::format("MiB of the {:.1f} MiB of weights in {}", static_cast<double>(bytes_stored) / kMiB, where);
  if (read.size() == 1) return fmt::format("model: this process read {:.1f} {}", read[0] / kMiB, of);
  if (read.size() <= 16) {
    std::string list;
    for (double r : read) list += fmt::format("{}{:.1f}", list.empty() ? "" : ", ", r / kMiB);
    return fmt::format("model: the {} ranks read {} {}", read.size(), list, of);
  }
  const auto [least, most] = std::minmax_element(read.begin(), read.end());
  return fmt::format("model: the {} ranks read {:.1f} to {:.1f} {} (rank {} the most)", read.size(), *least / kMiB,
                     *most / kMiB, of, most - read.begin());
}

}  // namespace gputrain
