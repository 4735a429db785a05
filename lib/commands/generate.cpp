#include "commands/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "checkpoint/inference_model.h"
#include "checkpoint/model_tokenizer.h"
#include "model/architecture.h"
#include "util/device.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace gputrain {
namespace {

using json = nlohmann::ordered_json;

// One sample's tokens and how it ended: eos | max_new_tokens | context (the model's positions ran out).
struct Sample {
  std::vector<uint32_t> ids;
  std::string stop;
};

void write(std::FILE* out, const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), out);
  std::fflush(out);
}

// Prints what decoding the sample so far adds to what was printed (decoding is prefix-stable for
// byte-level tokenizers; where a later token changes earlier text, the rest waits for the end).
class TextStream {
 public:
  TextStream(const Tokenizer& t, std::FILE* out) : tokenizer_(t), out_(out) {}
  void update(const std::vector<uint32_t>& ids) {
    const std::string text = tokenizer_.decode(ids);
    if (text.compare(0, printed_.size(), printed_) != 0) return;
    write(out_, text.substr(printed_.size()));
    printed_ = text;
  }
  // The sample's final text: what is still unprinted of it, and the end of the line.
  void finish(const std::string& text) {
    if (text.compare(0, printed_.size(), printed_) == 0) write(out_, text.substr(printed_.size()));
    write(out_, "\n");
  }

 private:
  const Tokenizer& tokenizer_;
  std::FILE* out_;
  std::string printed_;
};

std::vector<uint32_t> prompt_ids(const Tokenizer& tokenizer, const std::string& prompt, bool framed) {
  std::vector<uint32_t> ids = framed ? tokenizer.framing().before : std::vector<uint32_t>();
  tokenizer.make_encoder()->encode(prompt, ids);
  return ids;
}

}  // namespace

void generate_text(const GenerateOptions& o, std::FILE* out) {
  const torch::Device device = resolve_device(o.device);
  InferenceModel m = load_inference_model(o.where, device, o.quantize);
  const std::unique_ptr<Tokenizer> tokenizer = model_tokenizer(m, o.tokenizer);
  const int64_t vocab = m.settings.model.vocab_size;
  // Text data trained on raw bytes has no document framing; shards framed each document.
  const bool framed = !(o.tokenizer.name.empty() && !m.hf_folder && m.settings.data.train.format == DataFormat::kText);
  const std::vector<uint32_t> prompt = prompt_ids(*tokenizer, o.prompt, framed);
  if (prompt.empty())
    throw usage_error("the prompt is empty\n    fix: pass --prompt TEXT (or - to read it from stdin)");
  for (uint32_t id : prompt)
    if (id >= vocab)
      throw usage_error("the tokenizer (" + tokenizer->name() + ") gives the prompt id " + std::to_string(id) +
                        ", past the model's vocabulary of " + std::to_string(vocab) +
                        "\n    fix: pass the tokenizer the model was trained with (--tokenizer)");
  const int64_t context = m.model->context_length();
  if (static_cast<int64_t>(prompt.size()) >= context)
    throw usage_error("the prompt is " + std::to_string(prompt.size()) + " tokens; the model takes " +
                      std::to_string(context) + " positions, leaving no room to generate\n    fix: shorten the prompt");
  const std::vector<int64_t> stops = end_of_text_ids(m, *tokenizer);
  // Ids past the tokenizer's (a vocabulary rounded up, bytes in a larger model) are never chosen: no text has them.
  const int64_t choosable = std::min(vocab, tokenizer->vocab_size());
  spdlog::info("generate: {} ({}, step {}) on {}, tokenizer {}; prompt of {} tokens", m.source.string(),
               architecture(m.settings.model).display_name, m.step, device_name(device), tokenizer->name(),
               prompt.size());

  c10::InferenceMode inference;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  std::vector<int64_t> first(prompt.begin(), prompt.end());
  torch::Tensor tokens =
      torch::tensor(first, torch::dtype(torch::kLong)).to(device).unsqueeze(0).repeat({o.num_samples, 1});
  std::vector<Sample> samples(static_cast<size_t>(o.num_samples));
  const bool stream = !o.json && o.num_samples == 1;
  TextStream text(*tokenizer, out);
  if (stream) write(out, o.prompt);
  KvCache cache;
  const auto start = SteadyClock::now();
  int64_t generated = 0, running = o.num_samples;
  for (int64_t step = 0; step < o.max_new_tokens && running > 0; ++step) {
    if (cache.length + tokens.size(1) > context) {
      for (Sample& s : samples)
        if (s.stop.empty()) s.stop = "context";
      break;
    }
    const torch::Tensor logits = m.model->forward_cached(tokens, cache).select(1, -1).narrow(-1, 0, choosable);
    tokens = choose_next_tokens(logits, o.sampling, generator).unsqueeze(1);
    const torch::Tensor chosen = tokens.to(torch::kCPU);
    for (int64_t b = 0; b < o.num_samples; ++b) {
      Sample& s = samples[static_cast<size_t>(b)];
      if (!s.stop.empty()) continue;
      const int64_t id = chosen[b][0].item<int64_t>();
      s.ids.push_back(static_cast<uint32_t>(id));
      ++generated;
      if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
        s.stop = "eos";
        --running;
      } else if (stream) {
        text.update(s.ids);
      }
    }
  }
  for (Sample& s : samples)
    if (s.stop.empty()) s.stop = "max_new_tokens";
  const double seconds = seconds_since(start);

  auto text_of = [&](const Sample& s) {
    std::vector<uint32_t> ids = s.ids;
    if (s.stop == "eos") ids.pop_back();
    return tokenizer->decode(ids);
  };
  if (stream) {
    text.finish(text_of(samples.front()));
  } else if (o.json) {
    json j = {{"source", m.source.string()}, {"step", m.step},       {"tokenizer", tokenizer->name()},
              {"prompt", o.prompt},          {"prompt_ids", prompt}, {"samples", json::array()}};
    for (const Sample& s : samples) j["samples"].push_back({{"text", text_of(s)}, {"ids", s.ids}, {"stop", s.stop}});
    j["tokens_per_s"] = seconds > 0 ? static_cast<double>(generated) / seconds : 0.0;
    write(out, j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  } else {
    for (size_t i = 0; i < samples.size(); ++i)
      write(out, "=== sample " + std::to_string(i + 1) + " (" + samples[i].stop + ") ===\n" + o.prompt +
                     text_of(samples[i]) + "\n");
  }
  spdlog::info("generate: {} tokens in {:.2f} s ({:.1f} tokens/s)", generated, seconds,
               seconds > 0 ? static_cast<double>(generated) / seconds : 0.0);
}

}  // namespace gputrain
