// The metrics contract (DESIGN.md): metrics.jsonl gets one JSON object per
// logged step, flushed at once so a crash leaves only whole lines;
// summary.json is written once at the end, atomically (util/atomic_file.h).
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace gputrain {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // truncates; throws a runtime Error when unwritable
  // A resumed run: keeps the first `keep_bytes` of an existing file (the
  // lines up to the checkpoint's step; later lines would repeat steps) and appends.
  MetricsWriter(const std::string& path, int64_t keep_bytes);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const nlohmann::ordered_json& record);
  int64_t bytes() const;  // the file's length so far (what a checkpoint records)

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace gputrain
