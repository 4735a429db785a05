#include "metrics/tensorboard_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "metrics/tensorboard_event.h"
#include "metrics/tfrecord.h"
#include "util/error.h"

namespace gputrain {
namespace fs = std::filesystem;
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

bool is_event_file(const fs::path& p) { return p.filename().string().rfind("events.out.tfevents.", 0) == 0; }

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && is_event_file(e.path())) files.push_back(e.path());
  std::sort(files.begin(), files.end());  // TensorBoard reads them in name (= time) order too
  return files;
}

// TensorBoard's naming: events.out.tfevents.<seconds>.<host>.<pid>.<suffix>, unique in `dir`.
fs::path new_event_file(const fs::path& dir) {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const std::string base = "events.out.tfevents." + std::to_string(static_cast<int64_t>(now_s())) + "." + host + "." +
                           std::to_string(getpid()) + ".gputrain";
  fs::path p = dir / base;
  for (int i = 1; fs::exists(p); ++i) p = dir / (base + "." + std::to_string(i));
  return p;
}

// An event of an earlier file that a run continued from `step` keeps: scalars up to the step,
// texts (the recipe, the summary) before it, since the continued run writes its own at the step.
bool kept(const std::string& bytes, int64_t step, const std::string& file) {
  const auto e = tensorboard_event::read_event_head(bytes);
  if (!e)
    throw runtime_error("'" + file + "' holds a record that is not a TensorBoard event\n    fix: delete the file");
  if (!e->summary) return false;  // file versions: the new file has its own
  return e->text ? e->step < step : e->step <= step;
}

void write_all(std::FILE* f, const std::string& bytes, const fs::path& path) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fflush(f) != 0)
    throw runtime_error("cannot write '" + path.string() + "': " + std::strerror(errno));
}

void add_scalars(std::vector<tensorboard_event::Scalar>& out, const std::string& tag, const nlohmann::ordered_json& v) {
  if (v.is_number()) out.push_back({tag, v.get<float>()});
  if (v.is_object())
    for (auto it = v.begin(); it != v.end(); ++it) add_scalars(out, tag + "/" + it.key(), it.value());
}

// Four spaces before each line: markdown's code block, so YAML and JSON keep their layout.
std::string markdown_code_block(const std::string& text) {
  std::string out = "    ";
  for (char c : text) {
    out += c;
    if (c == '\n') out += "    ";
  }
  return out;
}

}  // namespace

std::string tensorboard_tag(const std::string& key) {
  if (key.rfind("eval_", 0) == 0) return "eval/" + key.substr(5);
  return "train/" + key;
}

TensorBoardWriter::TensorBoardWriter(const fs::path& dir, std::optional<int64_t> keep_through_step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw runtime_error("cannot create '" + dir.string() + "': " + ec.message());
  const std::vector<fs::path> earlier = event_files(dir);
  std::string head = frame_tfrecord(tensorboard_event::file_version_event(now_s()));
  if (keep_through_step)  // read (and checked) before anything is written
    for (const fs::path& f : earlier)
      for (const std::string& r : read_tfrecords(f.string()))
        if (kept(r, *keep_through_step, f.string())) head += frame_tfrecord(r);
  path_ = new_event_file(dir);
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) throw runtime_error("cannot write '" + path_.string() + "': " + std::strerror(errno));
  write_all(file_, head, path_);
  ::fsync(fileno(file_));  // the kept events are on disk before their old files go
  for (const fs::path& f : earlier) fs::remove(f, ec);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::write(const std::string& event_bytes) { write_all(file_, frame_tfrecord(event_bytes), path_); }

void TensorBoardWriter::scalars(const nlohmann::ordered_json& record) {
  std::vector<tensorboard_event::Scalar> values;
  for (auto it = record.begin(); it != record.end(); ++it)
    if (it.key() != "step") add_scalars(values, tensorboard_tag(it.key()), it.value());
  write(tensorboard_event::scalars_event(now_s(), record.at("step").get<int64_t>(), values));
}

void TensorBoardWriter::text(const std::string& tag, const std::string& text, int64_t step) {
  write(tensorboard_event::text_event(now_s(), step, tag, markdown_code_block(text)));
}

}  // namespace gputrain
