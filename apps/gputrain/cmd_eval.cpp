#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "commands/evaluate_dataset.h"
#include "util/text_file.h"

namespace gputrain::app {

namespace {

int eval(const EvalCommandOptions& o, const LaunchArgs& l) {
  messages_to_stderr();  // stdout carries the JSON alone
  if (l.launching()) {
    // Each worker runs `eval` with the same arguments and the torchrun variables; their messages
    // go to stderr, and rank 0's result comes back through a file.
    LaunchOptions lo = launch_options(l);
    const std::string out =
        o.out.empty()
            ? (std::filesystem::temp_directory_path() / ("gputrain-eval-" + std::to_string(getpid()) + ".json"))
                  .string()
            : o.out;
    lo.relay_fd = STDERR_FILENO;
    lo.worker_args = {"eval",         o.where,
                      "--format",     o.format,
                      "--device",     o.device,
                      "--batch-size", std::to_string(o.batch_size),
                      "--out",        out,
                      "--quantize",   quantize_flag_value(o.quantize),
                      "--precision",  o.bf16 ? "bf16" : "fp32"};
    if (!o.data.empty()) lo.worker_args.insert(lo.worker_args.end(), {"--data", o.data});
    if (!o.tokenizer.name.empty()) lo.worker_args.insert(lo.worker_args.end(), {"--tokenizer", o.tokenizer.name});
    if (!o.tokenizer.vocab_path.empty())
      lo.worker_args.insert(lo.worker_args.end(), {"--vocab", o.tokenizer.vocab_path});
    if (!o.tokenizer.merges_path.empty())
      lo.worker_args.insert(lo.worker_args.end(), {"--merges", o.tokenizer.merges_path});
    const int code = launch_workers(lo);
    if (code == 0) std::printf("%s", read_text_file(out, "evaluation result").c_str());
    if (o.out.empty()) std::filesystem::remove(out);
    return code;
  }
  if (const auto result = evaluate_dataset(o)) std::printf("%s\n", result->dump(2).c_str());
  return 0;
}

}  // namespace

void add_eval(CLI::App& cli, Commands& commands) {
  struct EvalArgs {
    EvalCommandOptions options;
    LaunchArgs launch;
  };
  auto e = std::make_shared<EvalArgs>();
  EvalCommandOptions& o = e->options;
  auto* cmd = cli.add_subcommand("eval", "loss, perplexity and bits per byte of a trained model over a whole dataset");
  cmd->add_option("model", o.where,
                  "a run's output folder or a checkpoint (newest complete one), or a Hugging Face model folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--data", o.data,
                  "a text file, token shards (a glob in quotes) or preference pairs (train_pairs.bin, val_pairs.bin: "
                  "loss, reward accuracy and margins of a DPO/ORPO/SimPO run); default: the run's data.eval");
  cmd->add_option("--format", o.format,
                  "auto = preference pairs for *_pairs.bin, token shards for other .bin paths, else text")
      ->check(CLI::IsMember({"auto", "text", "tokens", "preference"}))
      ->capture_default_str();
  cmd->add_option("--batch-size", o.batch_size, "windows per forward; 0 = the run's train.per_device_batch_size")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--device", o.device, "auto (a GPU when there is one), cpu, cuda, cuda:N")->capture_default_str();
  cmd->add_option("--tokenizer", o.tokenizer.name, "for bits per byte: bytes, gpt2 or a path (default: the model's)");
  cmd->add_option("--vocab", o.tokenizer.vocab_path, "gpt2: encoder.json");
  cmd->add_option("--merges", o.tokenizer.merges_path, "gpt2: vocab.bpe");
  cmd->add_option("--out", o.out, "also write the JSON result to this file");
  add_quantize_option(cmd, o.quantize);
  cmd->add_option_function<std::string>(
         "--precision", [&o](const std::string& v) { o.bf16 = v == "bf16"; },
         "fp32 (default) or bf16: the products under bf16 autocast, as a bf16 run computes (a 4-bit base "
         "dequantized into bf16, as bitsandbytes' bnb_4bit_compute_dtype=bfloat16)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--nproc-per-node", e->launch.nproc_per_node, "start this many processes, each reading a share")
      ->check(CLI::Range(1, 1024));
  commands.push_back({cmd, [e] { return eval(e->options, e->launch); }});
}

}  // namespace gputrain::app
