#include "train/batch_trace.h"

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace gputrain {

std::unique_ptr<BatchTrace> BatchTrace::from_environment(int rank) {
  const char* dir = std::getenv("GPUTRAIN_TRACE_BATCHES");
  if (dir == nullptr || *dir == '\0') return nullptr;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return std::unique_ptr<BatchTrace>(new BatchTrace(std::string(dir) + "/rank" + std::to_string(rank) + ".jsonl"));
}

BatchTrace::BatchTrace(const std::string& path) : out_(path, std::ios::app) {
  if (!out_) throw usage_error("GPUTRAIN_TRACE_BATCHES: cannot write '" + path + "'");
}

void BatchTrace::record(int64_t step, int64_t micro, const Batch& b) {
  const torch::Tensor input = b.input.to(torch::kCPU).contiguous();
  nlohmann::json rows = nlohmann::json::array();
  const int64_t* p = input.data_ptr<int64_t>();
  for (int64_t i = 0; i < input.size(0); ++i)
    rows.push_back(std::vector<int64_t>(p + i * input.size(1), p + (i + 1) * input.size(1)));
  out_ << nlohmann::json{{"step", step}, {"micro", micro}, {"input", rows}}.dump() << "\n" << std::flush;
}

}  // namespace gputrain
