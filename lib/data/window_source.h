// Where training windows come from. A window is seq_len + 1 consecutive tokens
// (inputs are the first seq_len, targets the last seq_len). Window k of a
// stream is a pure function of (seed, k), so sources are thread-safe and
// batches can be produced out of order by several workers.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "config/settings.h"

namespace gputrain {

class WindowSource {
 public:
  virtual ~WindowSource() = default;
  // Writes `len` tokens (int64) of the window chosen by `window_seed`.
  virtual void fill_window(uint64_t window_seed, int64_t len, int64_t* out) const = 0;
  // One line for the log: what the data is.
  virtual std::string describe() const = 0;
  // The loss no model can beat on this data, in nats/token, where it is known.
  virtual std::optional<double> entropy_floor(int64_t /*seq_len*/) const { return std::nullopt; }
};

// Builds the source named by a data.train / data.eval section. Throws a data
// Error naming the file for unreadable files.
std::unique_ptr<WindowSource> make_window_source(const DataSourceSettings& d, const ModelSettings& m);

}  // namespace gputrain
