// data prepare: shards hold exactly [EOT, document ids...] per document, the
// same for any thread count and chunking; splits, rotation and errors.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/prepare.h"
#include "data/token_windows.h"
#include "data/tokenizer.h"
#include "test_util.h"
#include "util/error.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Contains;

namespace {

TokenizerSpec gpt2_spec() { return {"gpt2", shared_data("gpt2/encoder.json"), shared_data("gpt2/vocab.bpe")}; }

PrepareOptions options(const std::vector<std::string>& inputs, const std::string& out) {
  PrepareOptions o;
  o.inputs = inputs;
  o.output_dir = out;
  o.tokenizer = gpt2_spec();
  o.progress = ProgressStyle::kOff;
  return o;
}

// Every token of the shards matching `pattern`, in order.
std::vector<uint32_t> read_tokens(const std::string& pattern) {
  DataSourceSettings d;
  d.format = DataFormat::kTokens;
  d.paths = {pattern};
  TokenDataset data(d, 1 << 20, "data.train");
  std::vector<uint32_t> out;
  for (size_t s = 0; s < data.shards().size(); ++s) {
    std::vector<int64_t> buf(static_cast<size_t>(data.shards()[s].count));
    data.read(static_cast<int64_t>(s), 0, data.shards()[s].count, buf.data());
    out.insert(out.end(), buf.begin(), buf.end());
  }
  return out;
}

std::vector<uint32_t> encode(const Tokenizer& t, std::string_view text) {
  std::vector<uint32_t> ids;
  t.make_encoder()->encode(text, ids);
  return ids;
}

}  // namespace

TEST_CASE("prepare: a whole-file document, split for val at a line break, any thread count", "[data][prepare]") {
  TempDir dir;
  const std::string text = read_file(shared_data("tinyshakespeare.txt"));
  auto tok = make_tokenizer(gpt2_spec());
  PrepareOptions o = options({shared_data("tinyshakespeare.txt")}, dir.file("one"));
  o.val_fraction = 0.1;
  o.threads = 1;
  PrepareResult r1 = prepare_dataset(o);
  o.output_dir = dir.file("many");
  o.threads = 3;
  o.chunk_bytes = 50000;  // ~22 chunks, cut inside the one document
  PrepareResult r3 = prepare_dataset(o);
  CHECK(r1.status == "ok");
  CHECK(r1.train_documents == 1);
  CHECK(r1.val_documents == 1);
  CHECK(r1.train_tokens == r3.train_tokens);
  CHECK(read_file(dir.file("one/train_000000.bin")) == read_file(dir.file("many/train_000000.bin")));
  CHECK(read_file(dir.file("one/val_000000.bin")) == read_file(dir.file("many/val_000000.bin")));

  const auto train = read_tokens(dir.file("one/train_*.bin"));
  const auto val = read_tokens(dir.file("one/val_*.bin"));
  REQUIRE(train.front() == tok->document_start_id());
  REQUIRE(val.front() == tok->document_start_id());
  // The val part is the last ~10% of the text, cut where tokenization is unaffected.
  const std::string train_text = tok->decode(std::span<const uint32_t>(train).subspan(1));
  const std::string val_text = tok->decode(std::span<const uint32_t>(val).subspan(1));
  CHECK(train_text + val_text == text);
  CHECK(val_text.size() == Approx(0.1 * text.size()).margin(200));
  std::vector<uint32_t> joined(train.begin() + 1, train.end());
  joined.insert(joined.end(), val.begin() + 1, val.end());
  CHECK(joined == encode(*tok, text));
  auto side = read_json(dir.file("one/val_000000.json"));
  CHECK(side["tokenizer"] == "gpt2");
  CHECK(side["vocab_size"] == 50257);
  CHECK(side["eot_token"] == 50256);
  CHECK(side["dtype"] == "uint16");
  CHECK(side["split"] == "val");
  CHECK(side["tokens"] == val.size());
}

TEST_CASE("prepare: paragraphs and lines are documents, each after an EOT", "[data][prepare]") {
  TempDir dir;
  write_file(dir.file("in.txt"), "First para\nline two\n\n\n  \nSecond para\r\n\nThird\n");
  auto tok = make_tokenizer(gpt2_spec());
  const uint32_t E = tok->document_start_id();
  PrepareOptions o = options({dir.file("in.txt")}, dir.file("p"));
  o.documents = DocumentUnit::kParagraph;
  o.val_fraction = 0;
  PrepareResult r = prepare_dataset(o);
  CHECK(r.train_documents == 3);
  std::vector<uint32_t> want;
  for (std::string doc : {"First para\nline two", "Second para\r", "Third"}) {
    want.push_back(E);
    for (uint32_t id : encode(*tok, doc)) want.push_back(id);
  }
  CHECK(read_tokens(dir.file("p/train_*.bin")) == want);

  o.documents = DocumentUnit::kLine;
  o.output_dir = dir.file("l");
  r = prepare_dataset(o);
  CHECK(r.train_documents == 4);  // blank and white-space-only lines are not documents
  want.clear();
  for (std::string doc : {"First para", "line two", "Second para", "Third"}) {
    want.push_back(E);
    for (uint32_t id : encode(*tok, doc)) want.push_back(id);
  }
  CHECK(read_tokens(dir.file("l/train_*.bin")) == want);
}

TEST_CASE("prepare: JSONL documents by --text-key, split by document, shards rotate", "[data][prepare]") {
  TempDir dir;
  std::string jsonl;
  std::vector<std::string> docs;
  for (int i = 0; i < 200; ++i) {
    docs.push_back("Document " + std::to_string(i) + ": caf\u00e9 \u4e2d\u6587 " + std::string(i % 7, '!'));
    jsonl += nlohmann::json{{"id", i}, {"content", docs.back()}}.dump() + "\n";
    if (i % 50 == 0) jsonl += "\n";  // blank lines are skipped
  }
  write_file(dir.file("docs.jsonl"), jsonl);
  auto tok = make_tokenizer(gpt2_spec());
  PrepareOptions o = options({dir.file("docs.jsonl")}, dir.file("out"));
  o.text_key = "content";
  o.val_fraction = 0.1;
  o.shard_tokens = 500;
  o.chunk_bytes = 1000;
  o.threads = 2;
  PrepareResult r = prepare_dataset(o);
  CHECK(r.train_documents + r.val_documents == 200);
  CHECK(r.val_documents == Approx(20).margin(2));
  CHECK(r.shards.size() > 4);
  int64_t sidecar_docs = 0;
  for (const auto& s : r.shards) {
    auto side = read_json(std::filesystem::path(s).replace_extension(".json").string());
    CHECK(side["tokens"].get<int64_t>() <= 500);
    sidecar_docs += side["documents"].get<int64_t>();
  }
  CHECK(sidecar_docs == 200);
  std::vector<uint32_t> want;
  for (const auto& d : docs) {
    want.push_back(tok->document_start_id());
    for (uint32_t id : encode(*tok, d)) want.push_back(id);
  }
  auto got = read_tokens(dir.file("out/train_*.bin"));
  const auto val = read_tokens(dir.file("out/val_*.bin"));
  got.insert(got.end(), val.begin(), val.end());
  CHECK(got == want);
}

TEST_CASE("prepare: malformed JSONL names the file and line", "[data][prepare]") {
  TempDir dir;
  write_file(dir.file("a.jsonl"), "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": oops}\n");
  write_file(dir.file("b.jsonl"), "{\"text\": \"ok\"}\n{\"body\": \"no text key\"}\n");
  write_file(dir.file("c.jsonl"), "{\"text\": 5}\n");
  auto err = [&](const std::string& in) {
    try {
      prepare_dataset(options({dir.file(in)}, dir.file("out_" + in)));
    } catch (const Error& e) {
      CHECK(exit_code_for(e.kind()) == 2);
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(err("a.jsonl"), Contains(dir.file("a.jsonl") + ":3: not valid JSON"));
  CHECK_THAT(err("b.jsonl"), Contains(dir.file("b.jsonl") + ":2: no \"text\" key"));
  CHECK_THAT(err("c.jsonl"), Contains(":1: \"text\" is number, not a string"));
  // Nothing that looks like a shard is left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir.file("out_a.jsonl")))
    CHECK(e.path().extension() != ".bin");
}

TEST_CASE("prepare: refuses to mix with earlier shards, and --overwrite replaces them all", "[data][prepare]") {
  TempDir dir;
  write_file(dir.file("in.txt"), std::string(3000, 'a') + "\n" + std::string(3000, 'b') + "\n");
  PrepareOptions o = options({dir.file("in.txt")}, dir.file("out"));
  o.tokenizer = {"bytes", "", ""};
  o.shard_tokens = 1000;
  o.val_fraction = 0;
  CHECK(prepare_dataset(o).shards.size() == 7);
  CHECK_THROWS_WITH(prepare_dataset(o), Contains("already holds shards"));
  o.overwrite = true;
  o.shard_tokens = 4000;
  CHECK(prepare_dataset(o).shards.size() == 2);
  CHECK_FALSE(std::filesystem::exists(dir.file("out/train_000002.bin")));
  CHECK_FALSE(std::filesystem::exists(dir.file("out/train_000002.json")));
  const auto ids = read_tokens(dir.file("out/train_*.bin"));
  CHECK(ids.size() == 6003);  // one EOT (256) and every byte
  CHECK(ids.front() == 256);
  // Bad inputs and options.
  o.inputs = {dir.file("missing.txt")};
  CHECK_THROWS_WITH(prepare_dataset(o), Contains("missing.txt"));
  o.inputs = {dir.path().string()};
  CHECK_THROWS_WITH(prepare_dataset(o), Contains("holds no .arrow files, so it is not a datasets folder"));
  write_file(dir.file("empty.txt"), "");
  o.inputs = {dir.file("empty.txt")};
  CHECK_THROWS_WITH(prepare_dataset(o), Contains("empty.txt' is empty"));
  o.inputs = {dir.file("in.txt")};
  o.val_fraction = 1.5;
  CHECK_THROWS_WITH(prepare_dataset(o), Contains("--val-fraction"));
}

TEST_CASE("prepare: BOS..EOS framing around whole-file documents, never cut inside by a Metaspace tokenizer",
          "[data][prepare][tokenizer]") {
  TempDir dir;
  const std::string text = read_file(shared_data("tinyshakespeare.txt")).substr(0, 60000);
  write_file(dir.file("a.txt"), text);
  write_file(dir.file("b.txt"), "Second file.\nIts last line.");
  const TokenizerSpec mistral{reference_tokenizer("mistral")};
  auto tok = make_tokenizer(mistral);
  std::vector<std::vector<uint32_t>> runs;
  for (int64_t threads : {1, 3}) {
    PrepareOptions o = options({dir.file("a.txt"), dir.file("b.txt")}, dir.file("t" + std::to_string(threads)));
    o.tokenizer = mistral;
    o.threads = threads;
    o.chunk_bytes = 2000;  // many chunks: a whole-file document must still be encoded in one piece
    o.val_fraction = 0;
    prepare_dataset(o);
    runs.push_back(read_tokens(dir.file("t" + std::to_string(threads) + "/train_*.bin")));
  }
  CHECK(runs[0] == runs[1]);
  std::vector<uint32_t> want{1};
  for (uint32_t id : encode(*tok, text)) want.push_back(id);
  want.push_back(2);
  want.push_back(1);
  for (uint32_t id : encode(*tok, "Second file.\nIts last line.")) want.push_back(id);
  want.push_back(2);
  CHECK(runs[0] == want);
}
