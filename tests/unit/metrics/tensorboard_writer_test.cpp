// TensorBoard's files at the byte level: TFRecord framing with TensorFlow's masked CRC-32C
// (values from the tensorboard package's own implementation), torn and corrupt files, the tags
// metrics.jsonl keys get, and a continued run's cut-back of earlier events.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <filesystem>

#include "metrics/tensorboard_event.h"
#include "metrics/tensorboard_writer.h"
#include "metrics/tfrecord.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  return files;
}

// (step, is text) of every summary event in the folder's one file.
std::vector<std::pair<int64_t, bool>> summary_events(const fs::path& dir) {
  const auto files = event_files(dir);
  REQUIRE(files.size() == 1);
  std::vector<std::pair<int64_t, bool>> out;
  for (const std::string& r : read_tfrecords(files.front().string())) {
    const auto head = tensorboard_event::read_event_head(r);
    REQUIRE(head);
    if (head->summary) out.emplace_back(head->step, head->text);
  }
  return out;
}

}  // namespace

TEST_CASE("tensorboard: TFRecord frames carry TensorFlow's masked CRC-32C", "[metrics]") {
  // tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c
  CHECK(masked_crc32c("123456789") == 0xc78ab0e5u);
  CHECK(masked_crc32c("") == 0xa282ead8u);
  const std::string framed = frame_tfrecord("abc");
  REQUIRE(framed.size() == 3 + 16);
  CHECK(framed.substr(0, 8) == std::string("\x03\0\0\0\0\0\0\0", 8));
  CHECK(framed.substr(12, 3) == "abc");
}

TEST_CASE("tensorboard: our Event bytes are those of the tensorboard package's own protobuf messages",
          "[metrics][python]") {
  const std::string script = R"(
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2
version = event_pb2.Event(wall_time=1.5, file_version="brain.Event:2")
scalars = event_pb2.Event(wall_time=1.5, step=7)
for tag, value in (("train/loss", 2.25), ("eval/loss", -0.5)):
    v = scalars.summary.value.add(); v.tag = tag; v.simple_value = value
text = event_pb2.Event(wall_time=2.0, step=300)
v = text.summary.value.add(); v.tag = "recipe"
v.metadata.plugin_data.plugin_name = "text"; v.metadata.data_class = summary_pb2.DATA_CLASS_TENSOR
v.tensor.dtype = types_pb2.DT_STRING; v.tensor.tensor_shape.SetInParent(); v.tensor.string_val.append(b"run: {name: x}")
print(version.SerializeToString().hex(), scalars.SerializeToString().hex(), text.SerializeToString().hex())
)";
  const CommandResult r = run_python({"-c", script});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto hex = [](const std::string& bytes) {
    std::string out;
    for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
    return out;
  };
  const std::string ours =
      hex(tensorboard_event::file_version_event(1.5)) + " " +
      hex(tensorboard_event::scalars_event(1.5, 7, {{"train/loss", 2.25f}, {"eval/loss", -0.5f}})) + " " +
      hex(tensorboard_event::text_event(2.0, 300, "recipe", "run: {name: x}"));
  CHECK(r.output == ours + "\n");
  const auto head = tensorboard_event::read_event_head(tensorboard_event::text_event(2.0, 300, "recipe", "x"));
  REQUIRE(head);
  CHECK((head->step == 300 && head->summary && head->text));
  CHECK_FALSE(
      tensorboard_event::read_event_head("\x0a\x05"
                                         "ab"));  // a length past the end
}

TEST_CASE("tensorboard: a torn last record is passed over and a corrupt one is refused", "[metrics]") {
  TempDir dir;
  const std::string whole = frame_tfrecord("first") + frame_tfrecord("second");
  write_file(dir.file("ok"), whole);
  CHECK(read_tfrecords(dir.file("ok")) == std::vector<std::string>{"first", "second"});
  write_file(dir.file("torn"), whole + frame_tfrecord("third").substr(0, 14));  // a crash while writing
  CHECK(read_tfrecords(dir.file("torn")) == std::vector<std::string>{"first", "second"});
  std::string bad = whole;
  bad[bad.size() - 8] ^= 1;  // a byte of the second payload
  write_file(dir.file("bad"), bad);
  const std::string message = error_message(ErrorKind::kRuntime, [&] { read_tfrecords(dir.file("bad")); });
  CHECK_THAT(message, Contains("bad") && Contains("checksum") && Contains("at byte 21") && Contains("fix:"));
}

TEST_CASE("tensorboard: metrics keys become train/ and eval/ tags", "[metrics]") {
  CHECK(tensorboard_tag("loss") == "train/loss");
  CHECK(tensorboard_tag("eval_loss") == "eval/loss");
  CHECK(tensorboard_tag("tokens_per_s") == "train/tokens_per_s");
}

TEST_CASE("tensorboard: a continued run keeps earlier scalars up to its step and texts before it", "[metrics]") {
  TempDir dir;
  const fs::path tb = dir.path() / "tensorboard";
  {
    TensorBoardWriter w(tb, std::nullopt);
    w.text("recipe", "a: 1", 0);
    for (int64_t step : {2, 4, 6, 8}) w.scalars({{"step", step}, {"loss", 1.0 / step}, {"eval_loss", nullptr}});
    w.text("summary", "{}", 8);
  }
  {
    TensorBoardWriter w(tb, 4);  // resumed from the checkpoint of step 4
    w.text("recipe", "a: 2", 4);
    w.scalars({{"step", 6}, {"loss", 0.1}});
  }
  CHECK(summary_events(tb) ==
        std::vector<std::pair<int64_t, bool>>{{0, true}, {2, false}, {4, false}, {4, true}, {6, false}});
  {
    TensorBoardWriter w(tb, std::nullopt);  // a new run in the folder starts over
    w.scalars({{"step", 1}, {"loss", 0.5}});
  }
  CHECK(summary_events(tb) == std::vector<std::pair<int64_t, bool>>{{1, false}});
}
