// safetensors: round trips, Hugging Face's library reading our files and us
// reading its files, atomic replacement, and corrupt files refused by name.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "test_util.h"
#include "util/error.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {

std::vector<NamedTensor> sample() {
  return {{"f32", at::arange(12, at::kFloat).reshape({3, 4})},
          {"bf16", at::arange(6, at::kFloat).reshape({2, 3}).to(at::kBFloat16)},
          {"f16", at::arange(5, at::kFloat).to(at::kHalf)},
          {"i64", at::arange(7, at::kLong)},
          {"u8", at::arange(9, at::kLong).to(at::kByte).reshape({3, 3})},
          {"empty", at::zeros({0, 4})}};
}

// A file from a header and data we choose (for corrupt cases).
void write_raw(const std::string& path, const std::string& header, const std::string& data, int64_t claimed = -1) {
  std::ofstream f(path, std::ios::binary);
  uint64_t len = claimed < 0 ? header.size() : static_cast<uint64_t>(claimed);
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(len >> (8 * i)));
  f << header << data;
}

}  // namespace

TEST_CASE("safetensors: every dtype round-trips with metadata, in file order", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("a.safetensors");
  auto tensors = sample();
  tensors.push_back({"strided", at::arange(6, at::kFloat).reshape({2, 3}).t()});  // non-contiguous input
  write_safetensors(path, tensors, {{"format", "pt"}});
  const SafetensorsFile f = read_safetensors(path);
  REQUIRE(f.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].name);
    CHECK(f.tensors[i].name == tensors[i].name);  // written in order, read back by offset
    CHECK(f.tensors[i].tensor.scalar_type() == tensors[i].tensor.scalar_type());
    CHECK(torch::equal(f.tensors[i].tensor, tensors[i].tensor.contiguous()));
  }
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.find("i64") != nullptr);
  CHECK(f.find("nope") == nullptr);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  // The data starts 8-byte aligned.
  CHECK((std::filesystem::file_size(path) - (4 * 12 + 2 * 6 + 2 * 5 + 8 * 7 + 9 + 4 * 6)) % 8 == 0);
}

TEST_CASE("safetensors: Hugging Face's library reads our files and we read its files", "[checkpoint]") {
  TempDir dir;
  write_safetensors(dir.file("ours.safetensors"), sample(), {{"format", "pt"}, {"who", "gputrain"}});
  auto r = run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/safetensors_interop.py",
                       dir.file("ours.safetensors"), dir.file("theirs.safetensors")});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const SafetensorsFile f = read_safetensors(dir.file("theirs.safetensors"));
  CHECK(f.metadata.at("from") == "python");
  REQUIRE(f.find("weight") != nullptr);
  CHECK(torch::equal(*f.find("weight"), at::arange(20, at::kFloat).reshape({4, 5}) / 4));
  CHECK(torch::equal(*f.find("half"), at::arange(3, at::kFloat).to(at::kHalf)));
  CHECK(torch::equal(*f.find("idx"), at::tensor({-1, 5, 7}, at::kLong)));
}

TEST_CASE("safetensors: writing replaces the old file whole, and bad names are refused", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  write_safetensors(path, {{"a", at::ones({1000})}});
  write_safetensors(path, {{"b", at::zeros({3})}});
  const SafetensorsFile f = read_safetensors(path);
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].name == "b");
  CHECK_THROWS_WITH(write_safetensors(path, {{"x", at::ones({1})}, {"x", at::ones({1})}}), Contains("repeated"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"__metadata__", at::ones({1})}}), Contains("reserved"));
  CHECK(read_safetensors(path).tensors[0].name == "b");  // the failed writes left it alone
}

TEST_CASE("safetensors: truncated and corrupt files are refused, naming the file and the fault", "[checkpoint]") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  write_safetensors(good, sample());
  const auto size = std::filesystem::file_size(good);
  auto expect_error = [&](const std::string& path, const std::string& fault) {
    INFO(path);
    try {
      read_safetensors(path);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kData);
      CHECK_THAT(e.what(), Contains(path) && Contains(fault));
    }
  };
  std::filesystem::copy_file(good, dir.file("cut.safetensors"));
  std::filesystem::resize_file(dir.file("cut.safetensors"), size - 5);
  expect_error(dir.file("cut.safetensors"), "past the file's");  // the last tensor runs past the data
  std::filesystem::resize_file(dir.file("cut.safetensors"), 6);
  expect_error(dir.file("cut.safetensors"), "fewer than the 8-byte header length");
  const std::string f32 = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  write_raw(dir.file("huge.safetensors"), f32, std::string(8, '\0'), 1 << 30);
  expect_error(dir.file("huge.safetensors"), "the header claims 1073741824 bytes");
  write_raw(dir.file("json.safetensors"), "{\"t\": [", "");
  expect_error(dir.file("json.safetensors"), "not JSON");
  write_raw(dir.file("dtype.safetensors"), R"({"t":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "ab");
  expect_error(dir.file("dtype.safetensors"), "dtype F8_E4M3");
  write_raw(dir.file("shape.safetensors"), R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
            std::string(8, '\0'));
  expect_error(dir.file("shape.safetensors"), "has 8 bytes but its shape needs 12");
  write_raw(
      dir.file("hole.safetensors"),
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})",
      "abcde");
  expect_error(dir.file("hole.safetensors"), "'b' starts at byte 3, not 2");
  write_raw(dir.file("tail.safetensors"), R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "abcd");
  expect_error(dir.file("tail.safetensors"), "2 bytes after the last tensor");
  write_raw(dir.file("entry.safetensors"), R"({"a":{"dtype":"U8","shape":"x","data_offsets":[0,2]}})", "ab");
  expect_error(dir.file("entry.safetensors"), "header entry of 'a' is malformed");
  expect_error(dir.file("missing.safetensors"), "missing.safetensors");
}
