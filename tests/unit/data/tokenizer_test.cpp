// Tokenizers: our GPT-2 BPE gives HF tokenizers' ids (the reference, run
// here through Python) on varied text and on all of tinyshakespeare.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <random>

#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "test_util.h"
#include "unit/data/tokenizer_texts.h"
#include "util/error.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Contains;

namespace {

std::unique_ptr<Tokenizer> gpt2() {
  return make_tokenizer({"gpt2", shared_data("gpt2/encoder.json"), shared_data("gpt2/vocab.bpe")});
}

std::vector<uint32_t> encode(const Tokenizer& t, std::string_view text) {
  std::vector<uint32_t> ids;
  t.make_encoder()->encode(text, ids);
  return ids;
}

// HF tokenizers' ids for each text (or for the file, when `texts` is empty).
std::vector<std::vector<uint32_t>> reference_ids(const std::vector<std::string>& texts, const std::string& file = "") {
  TempDir dir;
  std::string input = file;
  if (input.empty()) {
    input = dir.file("in.json");
    write_file(input, nlohmann::json(texts).dump());
  }
  CommandResult r =
      run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/gpt2_tokenize.py",
                  shared_data("gpt2/encoder.json"), shared_data("gpt2/vocab.bpe"), input, dir.file("out.json")});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return read_json(dir.file("out.json")).get<std::vector<std::vector<uint32_t>>>();
}

}  // namespace

TEST_CASE("GPT-2 BPE ids equal HF tokenizers' on varied text", "[data][tokenizer]") {
  auto t = gpt2();
  CHECK(t->vocab_size() == 50257);
  CHECK(t->document_start_id() == 50256);
  const auto texts = varied_text();
  const auto want = reference_ids(texts);
  REQUIRE(want.size() == texts.size());
  auto enc = t->make_encoder();  // one encoder for all: its cache must not change results
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<uint32_t> got;
    enc->encode(texts[i], got);
    INFO("text #" << i << ": " << nlohmann::json(texts[i]).dump());
    CHECK(got == want[i]);
    CHECK(t->decode(got) == texts[i]);
  }
}

TEST_CASE("GPT-2 BPE ids equal HF tokenizers' on all of tinyshakespeare", "[data][tokenizer]") {
  auto t = gpt2();
  const std::string text = read_file(shared_data("tinyshakespeare.txt"));
  const auto want = reference_ids({}, shared_data("tinyshakespeare.txt"));
  const auto got = encode(*t, text);
  CHECK(got.size() == want[0].size());
  CHECK(got == want[0]);
}

TEST_CASE("text cut at safe split points encodes exactly as the whole", "[data][tokenizer]") {
  auto t = gpt2();
  const std::string text = read_file(shared_data("tinyshakespeare.txt")).substr(0, 200000);
  const auto whole = encode(*t, text);
  std::vector<uint32_t> pieces;
  auto enc = t->make_encoder();
  size_t pos = 0, cuts = 0;
  while (pos < text.size()) {
    size_t cut = safe_split_point(text, pos + 997, 10000);  // an odd stride lands anywhere in a line
    if (cut == std::string_view::npos) cut = text.size();
    enc->encode(std::string_view(text).substr(pos, cut - pos), pieces);
    pos = cut, ++cuts;
  }
  CHECK(cuts > 150);
  CHECK(pieces == whole);
  // The rule itself: after "\n" with non-space on both sides only.
  CHECK(safe_split_point("ab\ncd", 0, 100) == 3);
  CHECK(safe_split_point("ab\n cd", 0, 100) == std::string_view::npos);
  CHECK(safe_split_point("ab \ncd", 0, 100) == std::string_view::npos);
  CHECK(safe_split_point("ab\n\ncd", 0, 100) == std::string_view::npos);
}

TEST_CASE("the pre-tokenizer splits as GPT-2's pattern does", "[data][tokenizer]") {
  std::vector<std::string_view> p;
  gpt2_pretokenize("Hello  world's\n\n 12ab!!", p);
  CHECK(p == std::vector<std::string_view>{"Hello", " ", " world", "'s", "\n\n", " 12", "ab", "!!"});
  p.clear();
  gpt2_pretokenize("a \xff\xfe b", p);  // bytes that are not UTF-8 are "other" characters
  CHECK(p == std::vector<std::string_view>{"a", " \xff\xfe", " b"});
}

TEST_CASE("bytes that are not UTF-8 round-trip through GPT-2 BPE", "[data][tokenizer]") {
  auto t = gpt2();
  const std::string text = "ok \xff\xc3(\x80 end\xe2\x82";
  CHECK(t->decode(encode(*t, text)) == text);
}

TEST_CASE("the bytes tokenizer: ids are bytes, end-of-document is 256", "[data][tokenizer]") {
  auto t = make_tokenizer({"bytes", "", ""});
  CHECK(t->vocab_size() == 257);
  CHECK(t->document_start_id() == 256);
  CHECK(encode(*t, "A\xff") == std::vector<uint32_t>{65, 255});
  CHECK(t->decode(std::vector<uint32_t>{104, 105, 256}) == "hi");
}

TEST_CASE("bad tokenizer files are data errors naming the file", "[data][tokenizer]") {
  TempDir dir;
  auto err = [](const TokenizerSpec& s) { return exit2_error_of([&] { make_tokenizer(s); }); };
  CHECK_THAT(err({"gpt2", dir.file("none.json"), shared_data("gpt2/vocab.bpe")}),
             Contains("cannot read the GPT-2 vocabulary (encoder.json) '" + dir.file("none.json") +
                      "'\n    fix: check the path"));
  CHECK_THAT(err({"gpt2", shared_data("gpt2/encoder.json"), dir.file("none.bpe")}),
             Contains("cannot read the GPT-2 merges file (vocab.bpe) '" + dir.file("none.bpe") + "'"));
  write_file(dir.file("bad.json"), "{\"a\": 0,");
  CHECK_THAT(err({"gpt2", dir.file("bad.json"), shared_data("gpt2/vocab.bpe")}), Contains("is not valid JSON"));
  write_file(dir.file("noeot.json"), "{\"a\": 0, \"b\": 1}");
  CHECK_THAT(err({"gpt2", dir.file("noeot.json"), shared_data("gpt2/vocab.bpe")}), Contains("<|endoftext|>"));
  // A merge that makes a token the vocabulary lacks names its line.
  write_file(dir.file("m.bpe"), "#version: 0.2\nt h\nzz qq\n");
  CHECK_THAT(err({"gpt2", shared_data("gpt2/encoder.json"), dir.file("m.bpe")}),
             Contains("m.bpe' line 3: merge 'zz qq' uses or makes a token that is not in the vocabulary"));
  CHECK_THAT(err({"gpt2", "", ""}), Contains("--vocab"));
  CHECK_THAT(err({"sentencepiece", "", ""}), Contains("unknown tokenizer 'sentencepiece': not bytes, not gpt2"));
}
