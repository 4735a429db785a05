// Token files: raw and llm.c shards are read exactly, shards round-trip, and
// every kind of bad file is a data error naming the file and the fix.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "data/loader.h"
#include "data/token_shard.h"
#include "data/token_windows.h"
#include "test_util.h"
#include "util/error.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Contains;

namespace {

std::string raw_tokens(const std::vector<uint32_t>& ids, int width) {
  std::string bytes;
  for (uint32_t v : ids) bytes.append(reinterpret_cast<const char*>(&v), static_cast<size_t>(width));
  return bytes;
}

std::string llmc_shard(const std::vector<uint32_t>& ids, int32_t magic = kLlmcMagicUint16, int32_t version = 1,
                       int64_t declared = -1) {
  int32_t header[256] = {};
  header[0] = magic, header[1] = version, header[2] = static_cast<int32_t>(declared < 0 ? ids.size() : declared);
  return std::string(reinterpret_cast<const char*>(header), sizeof header) +
         raw_tokens(ids, magic == kLlmcMagicUint16 ? 2 : 4);
}

DataSourceSettings tokens_at(std::vector<std::string> paths) {
  DataSourceSettings d;
  d.format = DataFormat::kTokens;
  d.paths = std::move(paths);
  return d;
}

std::vector<uint32_t> iota_ids(size_t n, uint32_t mod, uint32_t offset = 0) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>(i % mod) + offset;
  return v;
}

// The message of the data Error that opening `d` throws.
std::string open_error(const DataSourceSettings& d, const ModelSettings& m) {
  try {
    make_window_source(d, m, "data.train");
  } catch (const Error& e) {
    CHECK(exit_code_for(e.kind()) == 2);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("raw uint16 and uint32 files are read exactly, window by window", "[data]") {
  TempDir dir;
  for (auto dtype : {TokenDtype::kUint16, TokenDtype::kUint32}) {
    const int width = dtype == TokenDtype::kUint16 ? 2 : 4;
    const auto ids = iota_ids(1000, 997, width == 4 ? 70000 : 0);
    write_file(dir.file("t.bin"), raw_tokens(ids, width));
    DataSourceSettings d = tokens_at({dir.file("t.bin")});
    d.dtype = dtype;
    const ModelSettings m = model_settings(80000, 16, 1, 1, 8);
    auto src = make_window_source(d, m, "data.train");
    REQUIRE(src->window_count() == (1000 - 1) / 16);
    for (int64_t w = 0; w < src->window_count(); ++w) {
      int64_t out[17];
      REQUIRE(src->fill_window(static_cast<uint64_t>(w), 17, out) == 17);
      for (int k = 0; k < 17; ++k) CHECK(out[k] == ids[static_cast<size_t>(w * 16 + k)]);
    }
  }
}

TEST_CASE("shards written by ShardWriter read back with their sidecar", "[data]") {
  TempDir dir;
  ShardInfo info;
  info.tokenizer = "gpt2", info.vocab_size = 50257, info.eot_token = 50256, info.dtype = TokenDtype::kUint16;
  const auto ids = iota_ids(3000, 50257);
  {
    ShardWriter w(dir.file("train_000000.bin"), info);
    w.append(std::span<const uint32_t>(ids).first(1000));
    w.add_document();
    w.append(std::span<const uint32_t>(ids).subspan(1000));
    CHECK_FALSE(std::filesystem::exists(dir.file("train_000000.bin")));  // only complete shards appear
    w.finish();
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("train_000000.bin.partial")));
  const auto bytes = read_file(dir.file("train_000000.bin"));
  REQUIRE(bytes.size() == 1024 + 2 * 3000);
  auto h = parse_llmc_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x");
  REQUIRE(h);
  CHECK(h->dtype == TokenDtype::kUint16);
  CHECK(h->tokens == 3000);
  auto side = read_sidecar(dir.file("train_000000.bin"));
  REQUIRE(side);
  CHECK(side->tokens == 3000);
  CHECK(side->documents == 1);
  CHECK(side->eot_token == 50256);
  CHECK(side->split.empty());

  TokenWindows src(tokens_at({dir.file("train_*.bin")}), model_settings(50304, 99, 1, 1, 8), "data.train");
  CHECK(src.eot_token() == 50256);
  CHECK(src.dataset().tokenizer() == "gpt2");
  std::vector<int64_t> out(100);
  src.fill_window(5, 100, out.data());
  for (int k = 0; k < 100; ++k) CHECK(out[static_cast<size_t>(k)] == ids[static_cast<size_t>(5 * 99 + k)]);

  // A writer destroyed before finish() leaves nothing behind.
  {
    ShardWriter w(dir.file("val_000000.bin"), info);
    w.append(ids);
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("val_000000.bin")));
  CHECK_FALSE(std::filesystem::exists(dir.file("val_000000.bin.partial")));
}

TEST_CASE("llm.c headers: uint16 and uint32 shards, globs and lists in order", "[data]") {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "d");
  write_file(dir.file("d/a_000.bin"), llmc_shard(iota_ids(50, 50, 0)));
  write_file(dir.file("d/a_001.bin"), llmc_shard(iota_ids(50, 50, 100), kLlmcMagicUint32, kLlmcVersionUint32));
  write_file(dir.file("extra.bin"), llmc_shard(iota_ids(50, 50, 200)));
  TokenWindows src(tokens_at({dir.file("d/a_*.bin"), dir.file("extra.bin")}), model_settings(300, 9, 1, 1, 8),
                   "data.train");
  REQUIRE(src.dataset().shards().size() == 3);
  CHECK(src.dataset().shards()[1].width == 4);
  CHECK(src.dataset().total_tokens() == 150);
  REQUIRE(src.window_count() == 3 * 5);  // (50 - 1) / 9 windows per shard; none crosses a shard
  int64_t out[10];
  src.fill_window(5, 10, out);  // the second shard's first window
  CHECK(out[0] == 100);
  CHECK(out[9] == 109);
  src.fill_window(14, 10, out);  // the last window of extra.bin
  CHECK(out[0] == 236);
}

TEST_CASE("span selects windows in file order", "[data]") {
  TempDir dir;
  write_file(dir.file("t.bin"), llmc_shard(iota_ids(1001, 1000)));
  DataSourceSettings d = tokens_at({dir.file("t.bin")});
  d.span = {0.9, 1.0};
  TokenWindows src(d, model_settings(1000, 10, 1, 1, 8), "data.eval");
  CHECK(src.window_count() == 10);
  int64_t out[11];
  src.fill_window(0, 11, out);
  CHECK(out[0] == 900);
}

TEST_CASE("bad token files are data errors before training", "[data]") {
  TempDir dir;
  const ModelSettings m = model_settings(300, 8, 1, 1, 8);
  std::filesystem::create_directories(dir.path() / "adir");
  write_file(dir.file("empty.bin"), "");
  write_file(dir.file("odd.bin"), std::string(7, '\1'));
  write_file(dir.file("trunc.bin"), llmc_shard(iota_ids(50, 50), kLlmcMagicUint16, 1, 80));
  write_file(dir.file("long.bin"), llmc_shard(iota_ids(50, 50), kLlmcMagicUint16, 1, 40));
  write_file(dir.file("version.bin"), llmc_shard(iota_ids(50, 50), kLlmcMagicUint16, 3));
  write_file(dir.file("header_only.bin"), std::string(llmc_shard({}).substr(0, 600)));
  write_file(dir.file("zero.bin"), llmc_shard({}));
  write_file(dir.file("raw.bin"), raw_tokens(iota_ids(50, 50), 2));
  write_file(dir.file("tiny.bin"), llmc_shard(iota_ids(5, 5)));

  CHECK_THAT(open_error(tokens_at({dir.file("missing.bin")}), m),
             Contains("cannot open data file '" + dir.file("missing.bin")));
  CHECK_THAT(open_error(tokens_at({dir.file("adir")}), m), Contains("is a directory"));
  CHECK_THAT(open_error(tokens_at({dir.file("nothing_*.bin")}), m), Contains("matches no files"));
  CHECK_THAT(open_error(tokens_at({dir.file("nothing_*.bin")}), m), Contains("fix: check the directory and pattern"));
  // Shards not prepared yet: the directory itself is missing, and the fix says how to make it.
  CHECK_THAT(open_error(tokens_at({dir.file("unprepared/train_*.bin")}), m),
             Contains("matches no files: the directory '" + dir.file("unprepared") +
                      "' does not exist\n    fix: make "
                      "the shards first with `gputrain data prepare <text files> -o " +
                      dir.file("unprepared") + "`"));
  CHECK_THAT(open_error(tokens_at({dir.file("empty.bin")}), m), Contains("empty.bin' is empty"));
  CHECK_THAT(open_error(tokens_at({dir.file("trunc.bin")}), m),
             Contains("trunc.bin' is truncated: its header declares 80 tokens"));
  CHECK_THAT(open_error(tokens_at({dir.file("long.bin")}), m),
             Contains("bytes after the 40 tokens its header declares"));
  CHECK_THAT(open_error(tokens_at({dir.file("version.bin")}), m), Contains("but version 3 (expected 1)"));
  CHECK_THAT(open_error(tokens_at({dir.file("header_only.bin")}), m), Contains("less than its 1024-byte llm.c header"));
  CHECK_THAT(open_error(tokens_at({dir.file("zero.bin")}), m), Contains("holds no tokens"));
  CHECK_THAT(open_error(tokens_at({dir.file("raw.bin")}), m), Contains("cannot tell the token width"));
  CHECK_THAT(open_error(tokens_at({dir.file("tiny.bin")}), m), Contains("give 0 windows"));
  DataSourceSettings odd = tokens_at({dir.file("odd.bin")});
  odd.dtype = TokenDtype::kUint16;
  CHECK_THAT(open_error(odd, m), Contains("has 7 bytes, not a multiple of 2"));
  DataSourceSettings wrong = tokens_at({dir.file("long.bin")});
  wrong.dtype = TokenDtype::kUint32;
  CHECK_THAT(open_error(wrong, m), Contains("data.train.dtype is uint32 but"));
  // Raw files with a sidecar take its dtype; a sidecar that disagrees is caught.
  write_file(dir.file("raw.json"),
             R"({"format": "gputrain-token-shard", "dtype": "uint16", "tokens": 49, "vocab_size": 300})");
  CHECK_THAT(open_error(tokens_at({dir.file("raw.bin")}), m), Contains("holds 50 tokens but its sidecar"));
  write_file(
      dir.file("raw.json"),
      R"({"format": "gputrain-token-shard", "dtype": "uint16", "tokens": 50, "vocab_size": 50257, "tokenizer": "gpt2"})");
  CHECK_THAT(open_error(tokens_at({dir.file("raw.bin")}), m),
             Contains("whose 50257 ids do not fit model.vocab_size (300)"));
  write_file(dir.file("raw.json"), "{not json");
  CHECK_THAT(open_error(tokens_at({dir.file("raw.bin")}), m), Contains("raw.json' is not valid JSON"));
  write_file(dir.file("raw.json"),
             R"({"format": "gputrain-token-shard", "dtype": "uint16", "tokens": 50, "vocab_size": 300})");
  CHECK(open_error(tokens_at({dir.file("raw.bin")}), m).empty());
  // Packing by document needs the end-of-document id.
  DataSourceSettings packed = tokens_at({dir.file("raw.bin")});
  packed.packing = Packing::kDocuments;
  CHECK_THAT(open_error(packed, m), Contains("set data.train.eot_token"));
}

TEST_CASE("a token id beyond the vocabulary names the file and byte offset, also from worker threads", "[data]") {
  TempDir dir;
  auto ids = iota_ids(100, 5);
  ids[60] = 999;
  write_file(dir.file("bad.bin"), llmc_shard(ids));
  const ModelSettings m = model_settings(100, 9, 1, 1, 8);
  auto src = make_window_source(tokens_at({dir.file("bad.bin")}), m, "data.train");
  int64_t w[10];
  CHECK_NOTHROW(src->fill_window(0, 10, w));  // windows elsewhere are fine: no full scan at start
  try {
    src->fill_window(6, 10, w);  // tokens 54..63
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(exit_code_for(e.kind()) == 2);
    CHECK_THAT(e.what(), Contains("bad.bin': token id 999 at token offset 60 (byte 1144)"));
    CHECK_THAT(e.what(), Contains(">= model.vocab_size (100)"));
  }
  WindowSampler sampler(src->window_count(), SamplerOptions{});
  LoaderOptions o;
  o.batch_size = 11;  // the whole dataset in one batch: it holds window 6
  o.seq_len = 9;
  o.num_workers = 2;
  BatchLoader loader(*src, sampler, o);
  CHECK_THROWS_WITH(loader.next(), Contains("token id 999"));
}

TEST_CASE("text is byte-level tokens", "[data]") {
  TempDir dir;
  write_file(dir.file("t.txt"), "abcdefghijklmnopqrstuvwxyz");
  DataSourceSettings d;
  d.format = DataFormat::kText;
  d.paths = {dir.file("t.txt")};
  auto src = make_window_source(d, model_settings(256, 25, 1, 1, 8), "data.train");
  REQUIRE(src->window_count() == 1);
  int64_t w[26];
  src->fill_window(0, 26, w);
  for (int i = 0; i < 26; ++i) CHECK(w[i] == 'a' + i);
}
