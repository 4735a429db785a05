// Streamed inputs of data prepare: Parquet (nested columns, nulls,
// large_string), a datasets save_to_disk folder, Arrow's IPC file format and
// compressed JSONL (gzip members, zstd) -- written by HF datasets and
// pyarrow -- yield the same documents, and prepare the same shards; bad
// inputs are errors naming the file and the fix.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/document_stream.h"
#include "data/prepare.h"
#include "test_util.h"
#include "util/error.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Contains;

namespace {

namespace fs = std::filesystem;

// tests/reference/make_streamed_inputs.py's files, made once per build tree.
std::string inputs(const std::string& name) {
  static const std::string dir = [] {
    const std::string final_dir = std::string(GPUTRAIN_TEST_CACHE_DIR) + "/streamed_inputs";
    if (fs::exists(final_dir + "/docs.json")) return final_dir;
    const std::string tmp = final_dir + ".tmp" + std::to_string(::getpid());
    CommandResult r = run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/make_streamed_inputs.py",
                                  std::string(GPUTRAIN_SHARED_DATA_DIR), tmp});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::error_code ec;
    fs::rename(tmp, final_dir, ec);  // another test process may have won the race: use its copy
    if (ec) fs::remove_all(tmp);
    return final_dir;
  }();
  return dir + "/" + name;
}

std::vector<std::string> read_all(const std::string& path, size_t step) {
  auto s = open_document_stream(path, "content");
  std::vector<std::string> out;
  while (s->read(out, step) > 0) {
  }
  CHECK(s->rows() == static_cast<int64_t>(out.size()));
  return out;
}

}  // namespace

TEST_CASE("streamed inputs yield every row in order, whatever the read size", "[data][stream]") {
  const auto want = read_json(inputs("docs.json")).get<std::vector<std::string>>();
  for (const char* name : {"d.parquet", "large.parquet", "ds", "file.arrow", "d.jsonl.gz", "d.jsonl.zst"}) {
    SECTION(name) {
      for (size_t step : {1, 77, 100000}) CHECK(read_all(inputs(name), step) == want);
    }
  }
  CHECK(is_streamed_input(inputs("ds")));
  CHECK(is_streamed_input("x.jsonl.zst"));
  CHECK_FALSE(is_streamed_input("x.jsonl"));
}

TEST_CASE("prepare: every streamed format gives the same shards, split by rows", "[data][stream][prepare]") {
  TempDir dir;
  std::string first_train, first_val;
  for (const char* name : {"d.parquet", "ds", "file.arrow", "d.jsonl.gz", "d.jsonl.zst"}) {
    PrepareOptions o;
    o.inputs = {inputs(name)};
    o.output_dir = dir.file(name);
    o.tokenizer = {"gpt2", shared_data("gpt2/encoder.json"), shared_data("gpt2/vocab.bpe")};
    o.text_key = "content";
    o.val_fraction = 0.1;
    o.threads = 2;
    o.progress = ProgressStyle::kOff;
    const PrepareResult r = prepare_dataset(o);
    const int64_t rows = 1502, empty = 16;  // make_streamed_inputs.py: every 97th row is null
    CHECK(r.train_documents + r.val_documents == rows - empty);
    CHECK(r.val_documents == 150 - 2);  // the last 10% of the rows, two of them null
    const std::string train = read_file(dir.file(std::string(name) + "/train_000000.bin"));
    const std::string val = read_file(dir.file(std::string(name) + "/val_000000.bin"));
    if (first_train.empty()) first_train = train, first_val = val;
    CHECK(train == first_train);
    CHECK(val == first_val);
  }
}

TEST_CASE("bad streamed inputs are errors naming the file, the place and the fix", "[data][stream]") {
  TempDir dir;
  CHECK_THAT(exit2_error_of([&] { open_document_stream(inputs("d.parquet"), "text"); }),
             Contains("d.parquet' has no column \"text\"; its columns are: meta (struct<source: string, n: int64>), "
                      "messages (list<element: struct<role: string, content: string>>), content (string), id (int64)"
                      "\n    fix: name the text column with --text-key"));
  CHECK_THAT(exit2_error_of([&] { open_document_stream(inputs("d.parquet"), "id"); }),
             Contains("column \"id\" holds int64, not text"));
  CHECK_THAT(
      exit2_error_of([&] { open_document_stream(inputs("DatasetDict"), "content"); }),
      Contains("is a datasets DatasetDict (it holds dataset_dict.json)\n    fix: pass one split's folder, e.g. " +
               inputs("DatasetDict") + "/train"));
  const std::string parquet = read_file(inputs("d.parquet"));
  write_file(dir.file("cut.parquet"), parquet.substr(0, parquet.size() / 2));
  CHECK_THAT(exit2_error_of([&] { open_document_stream(dir.file("cut.parquet"), "content"); }),
             Contains("cut.parquet' is not a readable Parquet file"));
  const std::string gz = read_file(inputs("d.jsonl.gz"));
  write_file(dir.file("cut.jsonl.gz"), gz.substr(0, gz.size() / 3));
  CHECK_THAT(exit2_error_of([&] { read_all(dir.file("cut.jsonl.gz"), 100); }), Contains("cut.jsonl.gz"));
  const std::string zst = read_file(inputs("d.jsonl.zst"));
  write_file(dir.file("cut.jsonl.zst"), zst.substr(0, zst.size() / 3));
  CHECK_THAT(exit2_error_of([&] { read_all(dir.file("cut.jsonl.zst"), 100); }),
             Contains("cut.jsonl.zst' ends inside a zstd frame (truncated)"));
  write_file(dir.file("bad.jsonl.zst"), "not zstd at all");
  CHECK_THAT(exit2_error_of([&] { read_all(dir.file("bad.jsonl.zst"), 100); }),
             Contains("is not a readable zstd file"));
  fs::create_directories(dir.file("empty"));
  CHECK_THAT(exit2_error_of([&] { open_document_stream(dir.file("empty"), "content"); }),
             Contains("holds no .arrow files"));
  write_file(dir.file("a.txt"), "plain text\n");
  PrepareOptions o;
  o.inputs = {inputs("d.parquet"), dir.file("a.txt")};
  o.output_dir = dir.file("out");
  o.tokenizer = {"bytes"};
  o.text_key = "content";
  o.progress = ProgressStyle::kOff;
  CHECK_THAT(exit2_error_of([&] { prepare_dataset(o); }),
             Contains("cannot be mixed with Parquet, Arrow or compressed inputs"));
  CHECK_FALSE(fs::exists(dir.file("out/train_000000.bin")));
}

TEST_CASE("chat rows from Parquet, datasets folders and zstd JSONL prepare as the JSONL does", "[data][stream][chat]") {
  TempDir dir;
  auto prepare = [&](const std::string& input, const std::string& out) {
    PrepareOptions o;
    o.inputs = {input};
    o.output_dir = dir.file(out);
    o.tokenizer = {"bytes"};
    o.chat = true;
    o.val_fraction = 0;  // (mapped JSONL splits by bytes, streamed rows by rows)
    o.progress = ProgressStyle::kOff;
    return prepare_dataset(o);
  };
  const PrepareResult want = prepare(inputs("chat.jsonl"), "jsonl");
  CHECK(want.train_documents == 60);
  for (const char* name : {"chat.parquet", "chat_ds", "chat.jsonl.zst"}) {
    INFO(name);
    prepare(inputs(name), name);
    for (const char* f : {"train_000000.bin", "train_000000.mask"})
      CHECK(read_file(dir.file(std::string(name) + "/" + f)) == read_file(dir.file(std::string("jsonl/") + f)));
  }
  prepare(inputs("pc.jsonl"), "pc_jsonl");
  prepare(inputs("pc.parquet"), "pc_parquet");
  CHECK(read_file(dir.file("pc_parquet/train_000000.mask")) == read_file(dir.file("pc_jsonl/train_000000.mask")));
  CHECK(read_file(dir.file("pc_parquet/train_000000.bin")) == read_file(dir.file("pc_jsonl/train_000000.bin")));
  CHECK_THROWS_WITH(prepare(inputs("chat_bad.parquet"), "bad"),
                    Contains("chat_bad.parquet: row 8: messages[0] has the unknown role 'bot'"));
  CHECK_THAT(exit2_error_of([&] { open_document_stream(inputs("ds"), "content", RowKind::kChat); }),
             Contains("has neither a \"messages\" column nor string \"prompt\" and \"completion\" columns; its "
                      "columns are: id (int64), content (string)"));
  CHECK_THAT(exit2_error_of([&] { open_document_stream(inputs("d.parquet"), "content", RowKind::kChat); }),
             Contains("no error"));  // its messages column is list<struct<role, content>>
}
