// `gputrain data prepare --tokenizer FILE` end to end: the shards hold every
// document framed and encoded exactly as the reference library encodes it,
// for any thread count; the sidecars record the tokenizer; a recipe whose
// vocabulary is smaller than the tokenizer's is refused.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// Paragraphs of tinyshakespeare (and some harder text) as JSONL documents.
std::vector<std::string> documents(const std::string& jsonl) {
  const std::string text = read_file(shared_data("tinyshakespeare.txt")).substr(0, 40000);
  std::vector<std::string> docs;
  for (size_t pos = 0; pos < text.size();) {
    size_t gap = text.find("\n\n", pos);
    if (gap == std::string::npos) gap = text.size();
    docs.push_back(text.substr(pos, gap - pos));
    pos = gap + 2;
  }
  docs.push_back("<|begin_of_text|> and </s> are text here; caf\u00e9 \u4e2d\u6587 \U0001F600");
  std::string lines;
  for (const auto& d : docs) lines += nlohmann::json{{"text", d}}.dump() + "\n";
  write_file(jsonl, lines);
  return docs;
}

}  // namespace

TEST_CASE("cli: data prepare with a tokenizer file frames each document and records the tokenizer",
          "[cli][data][tokenizer]") {
  TempDir dir;
  const std::vector<std::string> docs = documents(dir.file("docs.jsonl"));
  struct Case {
    std::string tokenizer, reference_file;
    int width;
  };
  for (const Case& c : {Case{reference_tokenizer("llama3"), reference_tokenizer("llama3/tokenizer.json"), 4},
                        Case{reference_tokenizer("sentencepiece/tokenizer.model.v1.model"),
                             reference_tokenizer("sentencepiece/tokenizer.model.v1.model"), 2}}) {
    SECTION(c.tokenizer) {
      // 40 KB in 4 KiB chunks (about ten, cut at document boundaries), encoded by 1, 2 and 3 threads
      // that finish them in any order, against the whole text as one chunk.
      for (const char* threads : {"1", "2", "3"}) {
        auto r = run_gputrain({"data", "prepare", dir.file("docs.jsonl"), "-o", dir.file(std::string("out") + threads),
                               "--tokenizer", c.tokenizer, "--val-fraction", "0", "--threads", threads, "--chunk-kb",
                               "4", "--progress", "off"});
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        CHECK_THAT(r.output, Contains("model.vocab_size"));
      }
      auto whole = run_gputrain({"data", "prepare", dir.file("docs.jsonl"), "-o", dir.file("whole"), "--tokenizer",
                                 c.tokenizer, "--val-fraction", "0", "--threads", "1", "--progress", "off"});
      REQUIRE(whole.exit_code == 0);
      REQUIRE(fs::file_size(dir.file("docs.jsonl")) > 9 * 4096);
      for (const char* out : {"out1", "out2", "out3"})
        CHECK(read_file(dir.file(std::string(out) + "/train_000000.bin")) ==
              read_file(dir.file("whole/train_000000.bin")));
      const nlohmann::json side = read_json(dir.file("out1/train_000000.json"));
      INFO(side.dump(2));
      CHECK(side["tokenizer"] == fs::absolute(c.reference_file).lexically_normal().string());
      CHECK(side["tokenizer_crc32c"].get<std::string>().size() == 8);
      CHECK(side["dtype"] == (c.width == 4 ? "uint32" : "uint16"));
      CHECK(side["documents"] == docs.size());
      const auto bos = side["bos_token"].get<uint32_t>(), eos = side["eos_token"].get<uint32_t>();
      CHECK(side["document_before"] == std::vector<uint32_t>{bos});
      CHECK(side["document_after"] == std::vector<uint32_t>{eos});
      CHECK(side["eot_token"] == bos);  // the loader's document start
      // The shard is exactly BOS + the reference ids + EOS for each document in order.
      std::vector<uint32_t> want;
      for (const auto& ids : reference_token_ids(c.reference_file, docs)) {
        want.push_back(bos);
        want.insert(want.end(), ids.begin(), ids.end());
        want.push_back(eos);
      }
      CHECK(read_shard_ids(dir.file("out1/train_000000.bin"), c.width) == want);

      // GPT-2's vocabulary size cannot hold these ids.
      write_file(dir.file("small.yaml"),
                 "model: {vocab_size: 256, seq_len: 32, n_layer: 1, n_head: 1, d_model: 8}\n"
                 "data: {train: {format: tokens, path: out1/train_*.bin}}\n");
      auto v = run_gputrain({"validate", dir.file("small.yaml")});
      CHECK(v.exit_code == 2);
      CHECK_THAT(v.output, Contains("do not fit model.vocab_size (256)"));
    }
  }
}

TEST_CASE("cli: data prepare names an unusable tokenizer and writes nothing", "[cli][data][tokenizer]") {
  TempDir dir;
  write_file(dir.file("a.txt"), "some text\n");
  fs::create_directories(dir.file("tok"));
  write_file(dir.file("tok/tokenizer.json"), R"({"model": {"type": "Unigram", "vocab": []}})");
  auto r = run_gputrain({"data", "prepare", dir.file("a.txt"), "-o", dir.file("out"), "--tokenizer", dir.file("tok")});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("model (Unigram) is not a model gputrain implements"));
  CHECK_FALSE(fs::exists(dir.file("out/train_000000.bin")));
  auto u = run_gputrain({"data", "prepare", dir.file("a.txt"), "-o", dir.file("out"), "--tokenizer", "llama"});
  CHECK(u.exit_code == 2);
  CHECK_THAT(u.output, Contains("unknown tokenizer 'llama'"));
}

TEST_CASE("cli: shards from one tokenizer file read from two places mix, from two tokenizers they do not",
          "[cli][data][tokenizer]") {
  TempDir dir;
  documents(dir.file("docs.jsonl"));
  fs::copy(reference_tokenizer("mistral"), dir.file("copy"), fs::copy_options::recursive);
  for (const std::string& t : {reference_tokenizer("mistral"), dir.file("copy"), reference_tokenizer("gemma")}) {
    const std::string out = dir.file("out" + std::to_string(t.size()) + t.substr(t.size() - 3));
    auto r =
        run_gputrain({"data", "prepare", dir.file("docs.jsonl"), "-o", out, "--tokenizer", t, "--progress", "off"});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }
  auto recipe = [&](const std::string& a, const std::string& b) {
    write_file(dir.file("r.yaml"),
               "model: {vocab_size: 32768, seq_len: 32, n_layer: 1, n_head: 1, d_model: 8}\n"
               "data: {train: {format: tokens, path: [" +
                   a + ", " + b + "]}}\n");
    return run_gputrain({"validate", dir.file("r.yaml")});
  };
  const std::string shipped = "out" + std::to_string(reference_tokenizer("mistral").size()) + "ral/train_*.bin";
  const std::string copied = "out" + std::to_string(dir.file("copy").size()) + "opy/train_*.bin";
  const std::string gemma = "out" + std::to_string(reference_tokenizer("gemma").size()) + "mma/train_*.bin";
  auto same = recipe(shipped, copied);
  INFO(same.output);
  CHECK(same.exit_code == 0);
  auto other = recipe(shipped, gemma);
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.output, Contains("was made with tokenizer"));
}
