#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>

#include "commands.h"
#include "commands/generate.h"

namespace gputrain::app {

namespace {

int generate(GenerateOptions o) {
  messages_to_stderr();  // stdout carries the generated text alone
  if (o.prompt == "-") o.prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  generate_text(o, stdout);
  return 0;
}

}  // namespace

void add_generate(CLI::App& cli, Commands& commands) {
  auto g = std::make_shared<GenerateOptions>();
  auto* cmd = cli.add_subcommand("generate", "sample text from a trained model, streamed as it is written");
  cmd->add_option("model", g->where,
                  "a run's output folder or a checkpoint (newest complete one), or a Hugging Face model folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--prompt", g->prompt, "the text to continue; - reads it from stdin")->required();
  cmd->add_option("--max-new-tokens", g->max_new_tokens, "stop after this many new tokens")
      ->capture_default_str()
      ->check(kCount);
  cmd->add_option("--temperature", g->sampling.temperature, "0 = greedy (always the most likely token)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", g->sampling.top_k, "sample among the k most likely tokens; 0 = all")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--top-p", g->sampling.top_p, "sample among the most likely tokens whose probability reaches p")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", g->seed, "the sampling seed (the same seed, the same text)")->capture_default_str();
  cmd->add_option("--num-samples", g->num_samples, "samples drawn together (a batch)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  cmd->add_option("--device", g->device, "auto (a GPU when there is one), cpu, cuda, cuda:N")->capture_default_str();
  cmd->add_option("--tokenizer", g->tokenizer.name,
                  "bytes, gpt2 or a tokenizer path (default: the model's: its folder's files, or what its data "
                  "was prepared with)");
  cmd->add_option("--vocab", g->tokenizer.vocab_path, "gpt2: encoder.json");
  cmd->add_option("--merges", g->tokenizer.merges_path, "gpt2: vocab.bpe");
  add_quantize_option(cmd, g->quantize);
  cmd->add_flag("--json", g->json, "print one JSON object (text, token ids, why each sample stopped)");
  commands.push_back({cmd, [g] { return generate(*g); }});
}

}  // namespace gputrain::app
