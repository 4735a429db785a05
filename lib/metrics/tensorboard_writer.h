// TensorBoard's view of a run (metrics.tensorboard): event files under <output_dir>/tensorboard/
// holding every number of metrics.jsonl as a scalar (train/<key>, eval/<key> for eval_<key>), and
// texts (the resolved recipe, the summary). TFRecord framing (metrics/tfrecord.h) around
// TensorBoard's Event protobufs (metrics/tensorboard_event.h).
#pragma once
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace gputrain {

class TensorBoardWriter {
 public:
  // A new run (keep_through_step empty) removes the event files an earlier run left in `dir`. A
  // continued run keeps their events up to its checkpoint's step (scalars at it or before, texts
  // before it), as metrics.jsonl is cut back, rewritten into the one file this writer continues.
  // Throws a runtime Error when `dir` cannot be written or an earlier file is corrupt.
  TensorBoardWriter(const std::filesystem::path& dir, std::optional<int64_t> keep_through_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One metrics.jsonl line: each number (nested objects' too, as tag/sub) at the line's "step".
  void scalars(const nlohmann::ordered_json& record);
  // `text` under `tag` at `step`, shown as written (a markdown code block in the text plugin).
  void text(const std::string& tag, const std::string& text, int64_t step);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write(const std::string& event_bytes);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// The tag a metrics.jsonl key is shown under: eval_loss -> eval/loss, loss -> train/loss.
std::string tensorboard_tag(const std::string& key);

}  // namespace gputrain
