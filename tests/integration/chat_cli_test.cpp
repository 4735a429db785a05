// `data prepare --format chat` against transformers' apply_chat_template with the families' own
// templates (tests/reference/chat_reference.py): the same ids for each conversation (chatml and
// qwen2.5 with a Qwen2-style tokenizer, llama3 and llama3.1 with Llama 3 and 3.1-style ones, mistral
// with Mistral's v1 SentencePiece vocabulary), mistral-v0.3 against mistral_common's own instruct
// tokenizer with the v3 SentencePiece model both read, and the loss mask on exactly the assistant's tokens and
// end-of-turn tokens.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {
// Mistral 7B v0.3's SentencePiece model, as mistral_common ships it and reads it ([INST] and [/INST] are
// control pieces: special tokens).
const std::string kMistralV3Model = "sentencepiece/mistral_instruct_tokenizer_240323.model.v3.model";
}  // namespace

TEST_CASE("cli: chat rows give apply_chat_template's ids, with the loss on the assistant's tokens",
          "[cli][data][chat]") {
  TempDir dir;
  std::string rows;
  for (int i = 0; i < 12; ++i) {
    nlohmann::json r;
    if (i % 4 == 0) {
      r = {{"prompt", "Translate 'cat' to French (" + std::to_string(i) + ")."}, {"completion", "chat, le chat."}};
    } else {
      r["messages"] = {{{"role", "system"}, {"content", "Réponds en français."}},
                       {{"role", "user"}, {"content", "Bonjour ! Ça va ? " + std::to_string(i)}},
                       {{"role", "assistant"}, {"content", "Très bien, merci. 😀 " + std::to_string(i * 7)}},
                       {{"role", "user"}, {"content", "def f(x):\n    return x * 2\n"}},
                       {{"role", "assistant"}, {"content", (i % 2 ? "  It doubles x.\nDone.\n\n" : "It doubles x.")}}};
    }
    rows += r.dump() + "\n";
  }
  write_file(dir.file("c.jsonl"), rows);
  struct Case {
    std::string tokenizer, tmpl;
    bool chosen;       // the template the tokenizer's special tokens suggest, else named with --chat-template
    std::string date;  // --chat-date, and the reference template's date_string
  };
  for (const Case& c : {Case{"qwen2", "chatml", true}, Case{"qwen2", "qwen2.5", false}, Case{"llama3", "llama3", true},
                        Case{"llama3_1", "llama3.1", true, "27 Nov 2026"}, Case{"llama3_1", "llama3.1", false},
                        Case{"mistral", "mistral", false}, Case{kMistralV3Model, "mistral-v0.3", true}}) {
    SECTION(c.tmpl + (c.date.empty() ? "" : " dated")) {
      const std::string& tmpl = c.tmpl;
      const std::string tok = reference_tokenizer(c.tokenizer), name = c.tmpl;
      std::vector<std::string> args = {
          "data",        "prepare", dir.file("c.jsonl"), "-o", dir.file(name), "--format", "chat",
          "--tokenizer", tok,       "--val-fraction",    "0",  "--progress",   "off"};
      if (!c.chosen) args.insert(args.end(), {"--chat-template", tmpl});
      if (!c.date.empty()) args.insert(args.end(), {"--chat-date", c.date});
      auto r = run_gputrain(args);
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      CHECK_THAT(r.output, Contains("rendered with the " + tmpl + " template"));
      std::vector<std::string> ref_args = {std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/chat_reference.py",
                                           c.tokenizer == kMistralV3Model ? tok : tok + "/tokenizer.json", tmpl,
                                           dir.file("c.jsonl"), dir.file(name + ".json")};
      if (!c.date.empty()) ref_args.push_back(c.date);
      CommandResult ref = run_python(ref_args);
      INFO(ref.output);
      REQUIRE(ref.exit_code == 0);
      const auto want = read_json(dir.file(name + ".json"));
      const auto side = read_json(dir.file(name + "/train_000000.json"));
      CHECK(side["loss_mask"] == true);
      const std::vector<uint32_t> before = side["document_before"], after = side["document_after"];
      // The shard: for each row, the framing around the reference ids; the mask: the assistant's tokens.
      std::vector<uint32_t> ids, trained;
      for (const auto& w : want) {
        ids.insert(ids.end(), before.begin(), before.end());
        for (uint32_t id : w["ids"]) ids.push_back(id);
        ids.insert(ids.end(), after.begin(), after.end());
        for (uint32_t id : w["trained"]) trained.push_back(id);
      }
      const std::vector<uint32_t> got =
          read_shard_ids(dir.file(name + "/train_000000.bin"), side["dtype"] == "uint16" ? 2 : 4);
      const std::string mask = read_file(dir.file(name + "/train_000000.mask"));
      std::vector<uint32_t> got_trained;
      REQUIRE(mask.size() == got.size());
      for (size_t i = 0; i < got.size(); ++i)
        if (mask[i] == 1) got_trained.push_back(got[i]);
      CHECK(got == ids);
      CHECK(got_trained == trained);
    }
  }
}

TEST_CASE("cli: chat shards train the same in 2 processes as in 1, counting only the replies",
          "[cli][data][chat][slow]") {
  TempDir dir;
  auto prep = run_gputrain({"data", "prepare", std::string(GPUTRAIN_SOURCE_DIR) + "/configs/data/chat-sample.jsonl",
                            "-o", dir.file("chat"), "--format", "chat", "--tokenizer", "bytes", "--val-fraction", "0",
                            "--progress", "off"});
  INFO(prep.output);
  REQUIRE(prep.exit_code == 0);
  write_file(dir.file("r.yaml"),
             "run: {name: chat, threads: 1}\n"
             "model: {vocab_size: 320, seq_len: 64, n_layer: 1, n_head: 2, d_model: 32, dropout: 0.0}\n"
             "data: {train: {format: tokens, path: chat/train_*.bin, packing: documents}}\n"
             "train: {per_device_batch_size: 4, max_steps: 8, log_every: 1}\n"
             "optim: {lr: 3e-3}\n"
             "metrics: {progress: off}\n");
  auto one = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", dir.file("one")});
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  auto two = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", dir.file("two"), "--nproc-per-node", "2", "--set",
                           "train.per_device_batch_size=2"});
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  const auto a = read_jsonl(dir.file("one/metrics.jsonl")), b = read_jsonl(dir.file("two/metrics.jsonl"));
  REQUIRE(a.size() == 8);
  REQUIRE(b.size() == 8);
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(std::abs(a[i]["loss"].get<double>() - b[i]["loss"].get<double>()) < 1e-5);
    CHECK(a[i]["tokens"] == b[i]["tokens"]);
  }
  // 8 steps of 4 windows of 64: the replies are well under half of the positions.
  CHECK(a.back()["tokens"].get<int64_t>() < 8 * 4 * 64 / 2);
}
