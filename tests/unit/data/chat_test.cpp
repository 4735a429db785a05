// Chat data: rows parse or fail with the reason; templates mark the
// assistant's content and end token for loss; prepared chat shards carry a
// mask the loader turns into ignored targets, so prompt tokens get no
// gradient and the loss normalizer counts only the assistant's tokens.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "data/chat_format.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/sampler.h"
#include "data/token_dataset.h"
#include "data/window_source.h"
#include "model/cross_entropy.h"
#include "model/gpt.h"
#include "test_util.h"
#include "util/error.h"
#include "util/ignore_index.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Contains;

namespace {

std::string error_of(std::string_view row) {
  return exit2_error_of([&] { parse_chat_row(row); });
}

// Conversations as JSONL, some long enough to span windows.
std::string chat_rows() {
  std::string rows;
  for (int i = 0; i < 40; ++i) {
    nlohmann::json r;
    if (i % 3 == 0) {
      r = {{"prompt", "What is " + std::to_string(i) + " squared?"}, {"completion", std::to_string(i * i)}};
    } else {
      r["messages"] = {{{"role", "system"}, {"content", "You answer in one line."}},
                       {{"role", "user"}, {"content", "Say something about row " + std::to_string(i)}},
                       {{"role", "assistant"}, {"content", "Row " + std::to_string(i) + " is " + std::string(i, 'x')}},
                       {{"role", "user"}, {"content", "And again?"}},
                       {{"role", "assistant"}, {"content", "Again, row " + std::to_string(i) + "."}}};
    }
    rows += r.dump() + "\n";
  }
  return rows;
}

}  // namespace

TEST_CASE("chat rows: messages or prompt/completion, with the reason for a bad row", "[data][chat]") {
  CHECK(parse_chat_row(R"({"prompt": "a", "completion": "b"})").size() == 2);
  CHECK(parse_chat_row(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})")
            .back()
            .role == "assistant");
  CHECK_THAT(error_of(R"({"messages": [{"role": "bot", "content": "a"}]})"),
             Contains("messages[0] has the unknown role 'bot' (roles: system, user, assistant)"));
  CHECK_THAT(error_of(R"({"messages": [{"role": "user", "content": "a"}]})"),
             Contains("has no assistant turn, so nothing in it would take loss"));
  CHECK_THAT(error_of(R"({"messages": [{"role": "user"}]})"), Contains("messages[0] is not {\"role\""));
  CHECK_THAT(error_of(R"({"text": "a"})"), Contains("has neither \"messages\" nor \"prompt\"/\"completion\""));
  CHECK_THAT(error_of("[1, 2]"), Contains("expected a JSON object"));
  CHECK_THAT(error_of(R"({"prompt": "a", "completion": 3})"), Contains("must both be strings"));
}

TEST_CASE("chat templates: only the assistant's content and its end token take loss", "[data][chat]") {
  const std::vector<ChatMessage> m = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}};
  auto trained_text = [&](ChatTemplate t, bool specials) {
    std::string s;
    for (const auto& p : render_chat(t, m, [&](const std::string&) { return specials; }))
      if (p.trained) s += p.kind == ChatPiece::Kind::kEndOfText ? "<EOS>" : p.text;
    return s;
  };
  CHECK(trained_text(ChatTemplate::kChatml, true) == "A<|im_end|>");
  CHECK(trained_text(ChatTemplate::kLlama3, true) == "A<|eot_id|>");
  CHECK(trained_text(ChatTemplate::kMistral, false) == " A<EOS>");
  CHECK(trained_text(ChatTemplate::kPlain, false) == "A<EOS>");
  std::string mistral;
  for (const auto& p : render_chat(ChatTemplate::kMistral, m, [](const std::string&) { return false; }))
    mistral += p.kind == ChatPiece::Kind::kEndOfText ? "</s>" : p.text;
  CHECK(mistral == " [INST] S\n\nU [/INST] A</s>");
  CHECK(default_chat_template([](const std::string& s) { return s == "<|im_start|>"; }) == ChatTemplate::kChatml);
  CHECK(default_chat_template([](const std::string&) { return false; }) == ChatTemplate::kPlain);
}

TEST_CASE("chat templates: llama3 trims each message as Python's str.strip does, qwen2.5 adds its system message",
          "[data][chat]") {
  auto rendered = [](ChatTemplate t, const std::vector<ChatMessage>& m) {
    std::string s;
    for (const auto& p : render_chat(t, m, [](const std::string&) { return true; })) s += p.text;
    return s;
  };
  // Python: "\u3000\x1c\t hi\u00a0there \u2029\x85".strip() == "hi\u00a0there" (U+0085 is NEL: a space;
  // the no-break space inside stays); U+200B (zero width) is no space to Python.
  const std::string spaced = "\u3000\x1c\t hi\u00a0there \u2029\u0085";
  CHECK(rendered(ChatTemplate::kLlama3, {{"user", spaced}, {"assistant", "\u200b ok \n"}}) ==
        "<|start_header_id|>user<|end_header_id|>\n\nhi\u00a0there<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n\u200b ok<|eot_id|>");
  CHECK(rendered(ChatTemplate::kLlama3, {{"user", " \n "}, {"assistant", "a"}}).find("\n\n<|eot_id|>") !=
        std::string::npos);  // all space: empty
  // Qwen2.5: its default system message where the conversation has none; chatml writes none.
  const std::vector<ChatMessage> no_system = {{"user", "U"}, {"assistant", "A"}};
  CHECK(rendered(ChatTemplate::kQwen25, no_system) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n");
  CHECK(rendered(ChatTemplate::kChatml, no_system) ==
        "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n");
  const std::vector<ChatMessage> with_system = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}};
  CHECK(rendered(ChatTemplate::kQwen25, with_system) == rendered(ChatTemplate::kChatml, with_system));
  CHECK(chat_template_named("qwen2.5") == ChatTemplate::kQwen25);
}

TEST_CASE(
    "chat templates: llama3.1 always writes its dated system block, mistral-v0.3 puts the system message "
    "before the last user message",
    "[data][chat]") {
  auto rendered = [](ChatTemplate t, const std::vector<ChatMessage>& m, const std::string& today) {
    std::string s;
    for (const auto& p : render_chat(
             t, m, [](const std::string&) { return true; }, today))
      s += p.kind == ChatPiece::Kind::kEndOfText ? "</s>" : p.text;
    return s;
  };
  const std::string header = "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n";
  CHECK(rendered(ChatTemplate::kLlama31, {{"system", " S \n"}, {"user", "U"}, {"assistant", "A"}}, "1 Jan 2025") ==
        header + "Today Date: 1 Jan 2025\n\nS<|eot_id|>" +
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
            "\n\nA<|eot_id|>");
  CHECK(rendered(ChatTemplate::kLlama31, {{"user", "U"}, {"assistant", "A"}}, kLlama31DefaultDate)
            .starts_with(header + "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user"));
  const std::vector<ChatMessage> two_turns = {
      {"system", "S"}, {"user", "U1"}, {"assistant", " A1 "}, {"user", "U2"}, {"assistant", "A2"}};
  CHECK(rendered(ChatTemplate::kMistralV03, two_turns, "") == "[INST] U1[/INST]  A1 </s>[INST] S\n\nU2[/INST] A2</s>");
  // Alternation, as Mistral's templates require; a trailing user turn takes the system message.
  for (ChatTemplate t : {ChatTemplate::kMistral, ChatTemplate::kMistralV03}) {
    CHECK_THAT(exit2_error_of([&] {
                 render_chat(t, {{"user", "a"}, {"user", "b"}, {"assistant", "c"}}, {});
               }),
               Contains("messages[1] is a user turn where the " + std::string(chat_template_name(t)) +
                        " template needs an assistant turn"));
    CHECK_THAT(exit2_error_of([&] {
                 render_chat(t, {{"assistant", "a"}, {"user", "b"}}, {});
               }),
               Contains("messages[0] is an assistant turn"));
  }
  CHECK(rendered(ChatTemplate::kMistralV03, {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}}, "") ==
        "[INST] U[/INST] A</s>[INST] S\n\nV[/INST]");
  // Defaults: Llama 3.1 added <|eom_id|>; [INST] is a special token from Mistral's v3 vocabularies on.
  auto has = [](std::vector<std::string> specials) {
    return
        [specials](const std::string& s) { return std::find(specials.begin(), specials.end(), s) != specials.end(); };
  };
  CHECK(default_chat_template(has({"<|start_header_id|>", "<|eom_id|>"})) == ChatTemplate::kLlama31);
  CHECK(default_chat_template(has({"<|start_header_id|>"})) == ChatTemplate::kLlama3);
  CHECK(default_chat_template(has({"[INST]"})) == ChatTemplate::kMistralV03);
  for (const std::string& name : chat_template_names()) CHECK(chat_template_name(chat_template_named(name)) == name);
  CHECK_THAT(exit2_error_of([] { chat_template_named("llama2"); }),
             Contains("use one of chatml, qwen2.5, llama3, llama3.1, mistral, mistral-v0.3, plain"));
}

TEST_CASE("chat shards: masked targets are ignored, get no gradient, and are not counted", "[data][chat]") {
  TempDir dir;
  write_file(dir.file("chat.jsonl"), chat_rows());
  PrepareOptions o;
  o.inputs = {dir.file("chat.jsonl")};
  o.output_dir = dir.file("out");
  o.tokenizer = {"bytes"};
  o.chat = true;
  o.val_fraction = 0;
  o.progress = ProgressStyle::kOff;
  const PrepareResult r = prepare_dataset(o);
  CHECK(r.chat_template == "plain");
  CHECK(r.train_documents == 40);

  Settings s;
  s.model.vocab_size = 320, s.model.seq_len = 64, s.model.n_layer = 1, s.model.n_head = 2, s.model.d_model = 16;
  s.data.train.format = DataFormat::kTokens;
  s.data.train.paths = {dir.file("out/train_*.bin")};
  auto source = make_window_source(s.data.train, s.model, "data.train");
  REQUIRE(source->has_loss_mask());
  WindowSampler sampler(*source, SamplerOptions{1, kTrainStream});
  LoaderOptions lo;
  lo.batch_size = 8, lo.seq_len = 64;
  BatchLoader loader(*source, sampler, lo);
  const Batch b = loader.next();
  // The loader's targets against the mask file, window by window.
  int64_t counted = 0, ignored = 0;
  for (int64_t row = 0; row < 8; ++row) {
    const uint64_t key = sampler.window(row);
    std::vector<int64_t> ids(65);
    std::vector<uint8_t> mask(65);
    const int64_t real = source->fill_window(key, 65, ids.data());
    source->fill_mask(key, real, mask.data());
    for (int64_t t = 0; t < 64; ++t) {
      const int64_t y = b.target[row][t].item<int64_t>();
      const bool takes_loss = t + 1 < real && mask[static_cast<size_t>(t + 1)] == 1;
      CHECK(y == (takes_loss ? ids[static_cast<size_t>(t + 1)] : kIgnoreIndex));
      counted += takes_loss, ignored += !takes_loss;
    }
  }
  CHECK(b.target_count == counted);
  CHECK(counted > 50);
  CHECK(ignored > counted);  // prompts, roles and system lines dominate

  // No gradient reaches the logits of a masked position.
  torch::manual_seed(0);
  Gpt model(s.model);
  torch::Tensor logits = model->forward(b.input);
  logits.retain_grad();
  const torch::Tensor loss =
      cross_entropy_sum_reference(logits.reshape({-1, logits.size(-1)}), b.target.reshape({-1}), kIgnoreIndex);
  (loss / static_cast<double>(b.target_count)).backward();
  const torch::Tensor row_grad = logits.grad().abs().sum(-1).reshape({-1});
  const torch::Tensor masked = b.target.reshape({-1}) == kIgnoreIndex;
  CHECK(row_grad.masked_select(masked).max().item<double>() == 0.0);
  CHECK(row_grad.masked_select(~masked).min().item<double>() > 0.0);
  // The model's own loss sums the same unmasked targets.
  CHECK(model->loss_sum(b.input, b.target).item<double>() == Approx(loss.item<double>()).epsilon(1e-5));
}

TEST_CASE("chat: bad rows stop with file:line and the fix, or are skipped and counted", "[data][chat]") {
  TempDir dir;
  write_file(dir.file("c.jsonl"), chat_rows() + R"({"messages": [{"role": "bot", "content": "x"}]})" + "\n" +
                                      R"({"messages": [{"role": "user", "content": "only a question"}]})" + "\n");
  PrepareOptions o;
  o.inputs = {dir.file("c.jsonl")};
  o.output_dir = dir.file("out");
  o.tokenizer = {"bytes"};
  o.chat = true;
  o.progress = ProgressStyle::kOff;
  // The first bad row in file order, however the rows fall into chunks and threads.
  o.threads = 3;
  for (size_t chunk : {size_t{4} << 20, size_t{300}, size_t{50}}) {
    o.chunk_bytes = chunk;
    CHECK_THROWS_WITH(prepare_dataset(o),
                      Contains(dir.file("c.jsonl") + ":41: messages[0] has the unknown role 'bot'") &&
                          Contains("fix: repair the row, or pass --skip-bad-rows"));
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("out/train_000000.bin")));
  o.skip_bad_rows = true;
  const PrepareResult r = prepare_dataset(o);
  CHECK(r.skipped_rows == 2);
  CHECK_THAT(r.first_skipped, Contains("c.jsonl:41:"));
  CHECK(r.train_documents + r.val_documents == 40);
  // A template whose special tokens the tokenizer lacks is an error naming both.
  o.chat_template = "chatml";
  o.overwrite = true;
  CHECK_THROWS_WITH(prepare_dataset(o), Contains("the chatml chat template needs the special token <|im_start|>, which "
                                                 "tokenizer bytes does not have"));
  // --chat-date only where the template writes a date.
  o.chat_template = "plain";
  o.chat_date = "1 Jan 2025";
  CHECK_THROWS_WITH(prepare_dataset(o), Contains("--chat-date is the llama3.1 template's \"Today Date\", but these "
                                                 "rows are rendered with the plain template"));
  o.chat = false;
  CHECK_THROWS_WITH(prepare_dataset(o), Contains("add --format chat"));
}
