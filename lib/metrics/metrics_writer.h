// The metrics contract (DESIGN.md): metrics.jsonl gets one JSON object per
// logged step, flushed at once so a crash leaves only whole lines;
// summary.json is written once at the end, atomically (temp file + rename).
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace gputrain {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // truncates; throws a runtime Error when unwritable
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const nlohmann::ordered_json& record);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Writes `content` to `path` through a temporary file and rename, so readers
// see the old file or the new one, never half of one.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace gputrain
