// GPUTRAIN_TRACE_BATCHES=DIR, a test hook: each process appends one JSON line per micro-batch it trains
// on to DIR/rank<R>.jsonl, {"step", "micro", "input": [[token ids] per sample]}, so tests check what the
// model was fed (a mixture's sources, the data after a rollback) from the batches themselves.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>

#include "data/loader.h"

namespace gputrain {

class BatchTrace {
 public:
  // The trace of global rank `rank`; null when GPUTRAIN_TRACE_BATCHES is unset.
  static std::unique_ptr<BatchTrace> from_environment(int rank);
  void record(int64_t step, int64_t micro, const Batch& b);

 private:
  explicit BatchTrace(const std::string& path);
  std::ofstream out_;
};

}  // namespace gputrain
