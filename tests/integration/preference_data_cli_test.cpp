// `gputrain data prepare --format preference` (docs/preference.md): TRL's layouts (explicit and
// implicit prompts, strings and conversations, UltraFeedback-binarized rows) from JSONL, .jsonl.gz and
// Parquet give the same pairs; a conversation's ids are the chat format's; truncation as TRL's; bad
// rows stop with exit 2 naming the file and line, or are skipped and counted.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

struct Pairs {
  std::vector<std::vector<uint32_t>> prompt, chosen, rejected;
};

// The pairs of dir/<split>_pairs.{bin,idx}.
Pairs read_pairs(const std::string& dir, const std::string& split = "train") {
  const std::string bin = read_file(dir + "/" + split + "_pairs.bin"),
                    idx = read_file(dir + "/" + split + "_pairs.idx");
  const auto* ids = reinterpret_cast<const uint32_t*>(bin.data());
  const auto* lengths = reinterpret_cast<const int64_t*>(idx.data());
  Pairs p;
  size_t at = 0;
  for (size_t i = 0; i < idx.size() / sizeof(int64_t) / 3; ++i) {
    size_t k = 0;
    for (auto* part : {&p.prompt, &p.chosen, &p.rejected}) {
      const auto n = static_cast<size_t>(lengths[3 * i + k++]);
      part->emplace_back(ids + at, ids + at + n);
      at += n;
    }
  }
  CHECK(at * sizeof(uint32_t) == bin.size());
  return p;
}

CommandResult prepare(const std::vector<std::string>& inputs, const std::string& out,
                      const std::vector<std::string>& flags = {}) {
  std::vector<std::string> args = {"data", "prepare"};
  args.insert(args.end(), inputs.begin(), inputs.end());
  args.insert(args.end(), {"--format", "preference", "--tokenizer", reference_tokenizer("llama3"), "-o", out,
                           "--val-fraction", "0"});
  args.insert(args.end(), flags.begin(), flags.end());
  return run_gputrain(args);
}

const char* kExplicit =
    R"({"prompt": [{"role": "user", "content": "What colour is the sky?"}], "chosen": [{"role": "assistant", "content": "Blue."}], "rejected": [{"role": "assistant", "content": "Green, mostly."}]}
{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}], "chosen": [{"role": "assistant", "content": "6"}], "rejected": [{"role": "assistant", "content": "Seven"}]}
)";
const char* kImplicit =
    R"({"chosen": [{"role": "user", "content": "What colour is the sky?"}, {"role": "assistant", "content": "Blue."}], "rejected": [{"role": "user", "content": "What colour is the sky?"}, {"role": "assistant", "content": "Green, mostly."}]}
{"chosen": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "6"}], "rejected": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "Seven"}]}
)";

}  // namespace

TEST_CASE("preference data: explicit, implicit and UltraFeedback rows, JSONL, gzip and Parquet give the same pairs") {
  TempDir dir;
  write_file(dir.file("explicit.jsonl"), kExplicit);
  write_file(dir.file("implicit.jsonl"), kImplicit);
  // UltraFeedback-binarized: a string prompt beside whole conversations, and other columns.
  std::string ultra;
  for (const nlohmann::json& row : read_jsonl(dir.file("implicit.jsonl"))) {
    nlohmann::json u = row;
    u["prompt"] = "(the first user turn, as text)";
    u["score_chosen"] = 8.0;
    ultra += u.dump() + "\n";
  }
  write_file(dir.file("ultra.jsonl"), ultra);
  const CommandResult r = prepare({dir.file("explicit.jsonl")}, dir.file("explicit"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("2 train pairs"));
  CHECK_THAT(r.output, Contains("conversations rendered with the llama3 template"));
  const Pairs want = read_pairs(dir.file("explicit"));
  REQUIRE(want.prompt.size() == 2);
  // Streamed inputs: gzip, and Parquet written by pyarrow with list<struct<role, content>> columns.
  const CommandResult made =
      run_python({"-c",
                  "import gzip, json, sys, pyarrow as pa, pyarrow.parquet as pq\n"
                  "rows = [json.loads(l) for l in open(sys.argv[1])]\n"
                  "gzip.open(sys.argv[2], 'wt').write(''.join(json.dumps(r) + '\\n' for r in rows))\n"
                  "pq.write_table(pa.Table.from_pylist(rows), sys.argv[3])\n",
                  dir.file("explicit.jsonl"), dir.file("explicit.jsonl.gz"), dir.file("explicit.parquet")});
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  for (const char* input : {"implicit.jsonl", "ultra.jsonl", "explicit.jsonl.gz", "explicit.parquet"}) {
    INFO(input);
    const CommandResult again = prepare({dir.file(input)}, dir.file(std::string("out_") + input));
    INFO(again.output);
    REQUIRE(again.exit_code == 0);
    const Pairs got = read_pairs(dir.file(std::string("out_") + input));
    CHECK(got.prompt == want.prompt);
    CHECK(got.chosen == want.chosen);
    CHECK(got.rejected == want.rejected);
  }

  // A conversation's ids are the chat format's: prompt + chosen is the chat shard's conversation
  // (before its closing EOS), and the completion starts where the chat format's loss does.
  nlohmann::json chat_row = {
      {"messages", nlohmann::json::parse(R"([{"role": "user", "content": "What colour is the sky?"},
                                                                 {"role": "assistant", "content": "Blue."}])")}};
  write_file(dir.file("chat.jsonl"), chat_row.dump() + "\n");
  const CommandResult chat =
      run_gputrain({"data", "prepare", dir.file("chat.jsonl"), "--format", "chat", "--tokenizer",
                    reference_tokenizer("llama3"), "-o", dir.file("chat"), "--val-fraction", "0"});
  INFO(chat.output);
  REQUIRE(chat.exit_code == 0);
  const nlohmann::json sidecar = read_json(dir.file("chat/train_000000.json"));
  std::vector<uint32_t> ids = read_shard_ids(dir.file("chat/train_000000.bin"), 4);
  const std::string mask = read_file(dir.file("chat/train_000000.mask"));
  const size_t after = sidecar["document_after"].size();
  std::vector<uint32_t> pair = want.prompt[0];
  pair.insert(pair.end(), want.chosen[0].begin(), want.chosen[0].end());
  REQUIRE(ids.size() == pair.size() + after);
  ids.resize(pair.size());
  CHECK(ids == pair);
  CHECK(mask.find('\1') == want.prompt[0].size());
}

TEST_CASE("preference data: text rows, an implicit prompt of text, and TRL's truncation") {
  TempDir dir;
  write_file(dir.file("text.jsonl"),
             R"({"prompt": "The sky is", "chosen": " blue today, and clear.", "rejected": " green."}
{"chosen": "The sky is blue.", "rejected": "The sky is green."}
{"prompt": "A very long prompt that goes on and on and on about nothing much at all", "chosen": " yes", "rejected": " no"}
)");
  const CommandResult r = prepare({dir.file("text.jsonl")}, dir.file("plain"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const Pairs plain = read_pairs(dir.file("plain"));
  REQUIRE(plain.prompt.size() == 3);
  // The implicit prompt is the texts' shared start without its last space ("The sky is"): the same
  // ids as the explicit row's prompt; each completion ends with the tokenizer's EOS.
  CHECK(plain.prompt[1] == plain.prompt[0]);
  CHECK(plain.chosen[0].back() == plain.chosen[1].back());
  CHECK(plain.rejected[0] == plain.rejected[1]);

  // --max-prompt-length keeps a prompt's last ids; --max-length then keeps prompt + completion's first.
  const CommandResult cut =
      prepare({dir.file("text.jsonl")}, dir.file("cut"), {"--max-length", "8", "--max-prompt-length", "6"});
  INFO(cut.output);
  REQUIRE(cut.exit_code == 0);
  const Pairs cut_pairs = read_pairs(dir.file("cut"));
  REQUIRE(cut_pairs.prompt.size() == 3);
  const std::vector<uint32_t>& long_prompt = plain.prompt[2];
  CHECK(cut_pairs.prompt[2] == std::vector<uint32_t>(long_prompt.end() - 6, long_prompt.end()));
  for (size_t i = 0; i < 3; ++i) {
    CHECK(cut_pairs.prompt[i].size() + cut_pairs.chosen[i].size() <= 8);
    CHECK(cut_pairs.prompt[i].size() + cut_pairs.rejected[i].size() <= 8);
    CHECK(std::equal(cut_pairs.chosen[i].begin(), cut_pairs.chosen[i].end(), plain.chosen[i].begin()));
  }
  CHECK_THAT(cut.output, Contains("truncated"));
  // Without a prompt limit, a prompt that fills --max-length alone leaves no completion: dropped, counted.
  const CommandResult dropped = prepare({dir.file("text.jsonl")}, dir.file("dropped"), {"--max-length", "10"});
  INFO(dropped.output);
  REQUIRE(dropped.exit_code == 0);
  CHECK_THAT(dropped.output, Contains("dropped 1 pair(s) whose prompt alone fills --max-length"));
  CHECK(read_pairs(dir.file("dropped")).prompt.size() == 2);
  // --val-fraction holds out the last pairs.
  const CommandResult split =
      run_gputrain({"data", "prepare", dir.file("text.jsonl"), "--format", "preference", "--tokenizer",
                    reference_tokenizer("llama3"), "-o", dir.file("split"), "--val-fraction", "0.34"});
  REQUIRE(split.exit_code == 0);
  CHECK(read_pairs(dir.file("split"), "train").prompt.size() == 2);
  CHECK(read_pairs(dir.file("split"), "val").prompt == std::vector<std::vector<uint32_t>>{plain.prompt[2]});
}

TEST_CASE("preference data: a bad row stops with exit 2 naming file:line and the fix, or is skipped and counted") {
  TempDir dir;
  const std::string good = R"({"prompt": "Hi", "chosen": " there", "rejected": " go away"})";
  struct Bad {
    std::string row;
    const char* says;
  };
  for (
      const Bad& bad : std::vector<Bad>{
          {R"({"prompt": "Hi", "chosen": " there"})", "has no \"rejected\""},
          {R"({"prompt": "Hi", "chosen": "", "rejected": " no"})", "the chosen completion is empty"},
          {R"({"prompt": "Hi", "chosen": " a", "rejected": [{"role": "assistant", "content": "b"}]})",
           "not both strings or both lists of turns"},
          {R"({"prompt": [{"role": "assistant", "content": "Hello"}], "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]})",
           "the prompt's last turn is the assistant's"},
          {R"({"prompt": [{"role": "user", "content": "Hi"}], "chosen": [{"role": "user", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]})",
           "the chosen completion starts with the user's turn"},
          {R"({"chosen": [{"role": "user", "content": "a"}], "rejected": [{"role": "user", "content": "b"}]})",
           "share no first turn"},
          {R"(not json)", "not valid JSON"},
      }) {
    INFO(bad.row);
    const std::string input = dir.file("bad.jsonl");
    write_file(input, good + "\n\n" + bad.row + "\n" + good + "\n");  // the bad row on line 3
    const CommandResult r = prepare({input}, dir.file("out"), {"--overwrite"});
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(input + ":3: "));
    CHECK_THAT(r.output, Contains(bad.says));
    CHECK_THAT(r.output, Contains("--skip-bad-rows"));
    const CommandResult skipped = prepare({input}, dir.file("out"), {"--overwrite", "--skip-bad-rows"});
    INFO(skipped.output);
    CHECK(skipped.exit_code == 0);
    CHECK_THAT(skipped.output, Contains("skipped 1 bad row(s)"));
    CHECK(read_pairs(dir.file("out")).prompt.size() == 2);
  }
  // --max-length truncates pairs only: with text it is refused, not ignored.
  const CommandResult text_cut = run_gputrain({"data", "prepare", dir.file("bad.jsonl"), "-o", dir.file("text"),
                                               "--tokenizer", "bytes", "--input-format", "text", "--max-length", "8"});
  CHECK(text_cut.exit_code == 2);
  CHECK_THAT(text_cut.output, Contains("--max-length and --max-prompt-length truncate preference pairs"));
  // Text that is not JSONL stops too.
  write_file(dir.file("notes.txt"), "hello\n");
  const CommandResult text = prepare({dir.file("notes.txt")}, dir.file("out2"));
  CHECK(text.exit_code == 2);
  CHECK_THAT(text.output, Contains("is not JSONL, Parquet or Arrow"));
}
