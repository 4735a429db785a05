// gputrain: parse the command line, call one library function, map errors to
// exit codes (0 ok, 1 runtime failure, 2 bad recipe or usage, 130/143 after a
// graceful SIGINT/SIGTERM stop). Nothing else happens here (DESIGN rule 5).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"
#include "completion.h"
#include "data/chat_format.h"
#include "model/architecture.h"
#include "util/error.h"
#include "util/version.h"

namespace {

void add_recipe_args(CLI::App* cmd, gputrain::app::CommonArgs& a, bool required) {
  auto* opt = cmd->add_option("recipe", a.recipe,
                              required ? "recipe YAML file" : "recipe YAML file (default: the built-in quickstart)");
  if (required) opt->required();
  cmd->add_option("--set", a.overrides, "override a key, e.g. --set optim.lr=3e-4 (repeatable; value is YAML)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

// Counts such as --steps: CLI::PositiveNumber would print a double's whole range on a bad value.
const CLI::Range kCount(int64_t{1}, int64_t{1} << 30);

// A missing command ("gputrain", "gputrain optim") or a word where a command belongs that names
// none ("gputrain frobnicate", "gputrain data frob"): CLI11 reports only "A subcommand is
// required". Returns the error text, or "" when the words before the first option are fine.
std::string command_error(CLI::App& top, int argc, char** argv) {
  CLI::App* app = &top;
  std::string path = "gputrain";
  for (int i = 1;; ++i) {
    const auto commands = app->get_subcommands([](CLI::App*) { return true; });
    if (commands.empty()) return "";
    std::string names;
    for (CLI::App* c : commands) names.append(names.empty() ? "" : ", ").append(c->get_name());
    const std::string fix = "\n    fix: use one of " + names + " (`" + path + " --help` describes them)";
    if (i == argc) return "`" + path + "` needs a command" + fix;
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return "";  // --help, --version, or an option CLI11 reports
    auto it = std::find_if(commands.begin(), commands.end(), [&](CLI::App* c) { return c->get_name() == word; });
    if (it == commands.end()) return "unknown command '" + word + "' for `" + path + "`" + fix;
    app = *it;
    path.append(" ").append(word);
  }
}

}  // namespace

int main(int argc, char** argv) {
  namespace app = gputrain::app;
  CLI::App cli{"gputrain: train transformer language models from a YAML recipe", "gputrain"};
  cli.set_version_flag("--version", gputrain::version_string());
  cli.require_subcommand(1);
  cli.footer(
      "Exit codes: 0 ok, 1 runtime failure, 2 bad recipe, data, checkpoint or usage, 130 interrupted (SIGINT), 143 "
      "preempted (SIGTERM, SIGUSR1, max_wall_time). With --nproc-per-node: a failed worker's own code.");

  app::CommonArgs run_args, validate_args, print_args;
  std::string output_dir, format = "yaml";
  bool overwrite = false, reference = false, json_schema = false;

  auto* run = cli.add_subcommand("run", "train a model from a recipe");
  add_recipe_args(run, run_args, false);
  run->add_option("--output-dir", output_dir, "where metrics go (same as --set run.output_dir=DIR)");
  run->add_flag("--overwrite", overwrite, "replace an earlier run's metrics in the output directory");
  bool dry_run = false;
  run->add_flag("--dry-run", dry_run,
                "print the plan (parameters, FLOPs, memory per component) and exit; same as `plan`");
  app::LaunchArgs launch;
  run->add_option("--nproc-per-node", launch.nproc_per_node, "start this many workers here (one per GPU on CUDA)")
      ->check(CLI::Range(1, 1024));
  run->add_option("--nnodes", launch.nnodes, "machines in the run (start gputrain on each with its --node-rank)")
      ->check(CLI::Range(1, 65536));
  run->add_option("--node-rank", launch.node_rank, "this machine's index, 0 to nnodes-1")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--master-addr", launch.master_addr, "host of node 0, where rank 0 listens for the rendezvous");
  run->add_option("--master-port", launch.master_port, "rendezvous port; default: a free one (one node) or 29500")
      ->check(CLI::Range(1, 65535));

  app::CommonArgs plan_args;
  auto* plan = cli.add_subcommand("plan",
                                  "parameters, FLOPs per token, estimated memory per component, and "
                                  "the dp x pp x tp grid: which rank holds which layers and shards");
  add_recipe_args(plan, plan_args, false);
  int plan_world = 0;
  plan->add_option("--world-size", plan_world, "processes to plan the grid for (default: the recipe's degrees)")
      ->check(CLI::Range(1, 1 << 20));

  auto* validate = cli.add_subcommand("validate", "check a recipe; exit 0, or 2 listing every problem");
  add_recipe_args(validate, validate_args, true);

  auto* print = cli.add_subcommand("print-config", "print the fully resolved recipe, defaults included");
  add_recipe_args(print, print_args, false);
  print->add_option("--format", format, "output format")->check(CLI::IsMember({"yaml", "json"}));
  print->add_flag("--reference", reference, "print every key with its type, default and meaning (Markdown)");
  print->add_flag("--schema", json_schema,
                  "print the recipe's JSON Schema (draft 2020-12) for editors: every key, type, range, default");

  auto* data = cli.add_subcommand("data", "prepare token shards from text; measure the data loader");
  data->require_subcommand(1);
  gputrain::PrepareOptions prep;
  std::string tokenizer = "gpt2", documents = "file", input_format = "auto", progress = "auto", doc_format = "text";
  auto* prepare =
      data->add_subcommand("prepare", "encode text or JSONL files into llm.c token shards (+ .json sidecars)");
  prepare->add_option("inputs", prep.inputs, "text or JSONL files (documents in this order)")
      ->required()
      ->check(CLI::ExistingPath);
  prepare->add_option("-o,--output", prep.output_dir, "directory for train_*.bin and val_*.bin")->required();
  prepare
      ->add_option("--tokenizer", tokenizer,
                   "bytes (ids 0..255, end-of-document 256), gpt2 (byte-level BPE from --vocab/--merges), or the "
                   "path of a Hugging Face tokenizer.json, a SentencePiece .model, or a model folder holding either")
      ->capture_default_str();
  prepare->add_option("--bos-token", prep.tokenizer.bos_token,
                      "the text of the token put before each document, or none (default: the tokenizer's)");
  prepare->add_option("--eos-token", prep.tokenizer.eos_token,
                      "the text of the end-of-text token (default: from tokenizer_config.json or the tokenizer)");
  prepare->add_option("--vocab", prep.tokenizer.vocab_path, "gpt2: GPT-2's encoder.json")->check(CLI::ExistingFile);
  prepare->add_option("--merges", prep.tokenizer.merges_path, "gpt2: GPT-2's vocab.bpe (merges)")
      ->check(CLI::ExistingFile);
  prepare
      ->add_option("--format", doc_format,
                   "text: documents of text; chat: JSONL rows of messages or prompt/completion, rendered with a "
                   "chat template, loss on the assistant's tokens only")
      ->check(CLI::IsMember({"text", "chat"}))
      ->capture_default_str();
  prepare
      ->add_option("--chat-template", prep.chat_template,
                   "chat: the template (docs/data.md; default: the one the tokenizer's special tokens suggest)")
      ->check(CLI::IsMember(gputrain::chat_template_names()));
  prepare->add_option("--chat-date", prep.chat_date,
                      "chat, llama3.1: the system header's \"Today Date\" (default: 26 Jul 2024, its template's own)");
  prepare->add_flag("--skip-bad-rows", prep.skip_bad_rows,
                    "chat: skip rows with an unknown role or no assistant turn (counted) instead of stopping");
  prepare->add_option("--input-format", input_format, "text or jsonl; auto = jsonl for *.jsonl and *.json")
      ->check(CLI::IsMember({"auto", "text", "jsonl"}))
      ->capture_default_str();
  prepare->add_option("--text-key", prep.text_key, "jsonl: the key holding each document's text")
      ->capture_default_str();
  prepare
      ->add_option("--documents", documents,
                   "text: what one document is: file, lines, or paragraphs (blank-line separated)")
      ->check(CLI::IsMember({"file", "lines", "paragraphs"}))
      ->capture_default_str();
  prepare
      ->add_option("--val-fraction", prep.val_fraction,
                   "the last fraction of the input (by bytes) that becomes val_*.bin")
      ->capture_default_str();
  prepare->add_option("--shard-tokens", prep.shard_tokens, "tokens per shard file")->capture_default_str();
  prepare->add_option("--threads", prep.threads, "encoding threads; 0 = all cores")->capture_default_str();
  int64_t chunk_kb = static_cast<int64_t>(prep.chunk_bytes >> 10);
  prepare
      ->add_option(
          "--chunk-kb", chunk_kb,
          "text of one encoding task (KiB, cut at a document boundary); the threads encode chunks side by side")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 22));
  prepare->add_flag("--overwrite", prep.overwrite, "replace the shards already in the output directory");
  prepare->add_option("--progress", progress, "auto, bar, lines or off")
      ->check(CLI::IsMember({"auto", "bar", "lines", "off"}))
      ->capture_default_str();

  app::CommonArgs bench_args;
  std::vector<int64_t> bench_workers = {0, 1, 2, 4};
  int64_t bench_batches = 200;
  auto* bench = data->add_subcommand("bench", "measure the recipe's data loader (tokens/s by worker count)");
  add_recipe_args(bench, bench_args, false);
  bench->add_option("--workers", bench_workers, "worker counts to measure")->capture_default_str()->expected(1, -1);
  bench->add_option("--batches", bench_batches, "batches per measurement")->capture_default_str()->check(kCount);

  auto* optim = cli.add_subcommand("optim", "measure the optimizers");
  optim->require_subcommand(1);
  app::CommonArgs optim_bench_args;
  int64_t optim_bench_steps = 5;
  auto* optim_bench = optim->add_subcommand(
      "bench",
      "time one optimizer step of every optimizer on the recipe's model and device, with state bytes per parameter");
  add_recipe_args(optim_bench, optim_bench_args, false);
  optim_bench->add_option("--steps", optim_bench_steps, "timed steps per optimizer (after one warm-up step)")
      ->capture_default_str()
      ->check(kCount);

  auto* kernels = cli.add_subcommand("kernels", "measure the fused CUDA kernels");
  kernels->require_subcommand(1);
  app::CommonArgs kernels_bench_args;
  int64_t kernels_bench_repeats = 50;
  auto* kernels_bench = kernels->add_subcommand(
      "bench",
      "time each fused CUDA kernel against the ATen ops it replaces, forward + backward, at the recipe's shapes");
  add_recipe_args(kernels_bench, kernels_bench_args, false);
  kernels_bench->add_option("--repeats", kernels_bench_repeats, "timed repetitions per op (after one warm-up)")
      ->capture_default_str()
      ->check(kCount);

  std::string export_checkpoint, export_format = "hf", export_out, export_shard_size = "5GB", export_dtype = "auto";
  bool export_overwrite = false, export_merge_lora = false;
  auto* exp = cli.add_subcommand("export", "write a checkpoint's weights for other tools (Hugging Face transformers)");
  exp->add_option("checkpoint", export_checkpoint,
                  "a checkpoint directory (step_<N>), the directory holding them, or a run's output directory (newest "
                  "complete checkpoint)")
      ->required()
      ->check(CLI::ExistingDirectory);
  std::string hf_classes;
  for (const gputrain::Architecture* a : gputrain::architectures())
    hf_classes += (hf_classes.empty() ? "" : ", ") + std::string(a->hf.class_name) + " (model.arch " + a->name + ")";
  exp->add_option("--format", export_format,
                  "hf = " + hf_classes +
                      ": config.json, safetensors, generation_config.json and tokenizer files; peft = a LoRA "
                      "checkpoint's adapters as adapter_config.json + adapter_model.safetensors")
      ->check(CLI::IsMember({"hf", "peft"}))
      ->capture_default_str();
  exp->add_option("--max-shard-size", export_shard_size,
                  "hf: larger weights are split into shards of at most this size with an index (5GB, 500MB, 2GiB)")
      ->capture_default_str();
  exp->add_option("--dtype", export_dtype, "weights' dtype: auto = as trained (bf16-pure: bfloat16, else float32)")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16", "float16"}))
      ->capture_default_str();
  exp->add_option("--out", export_out, "directory to write")->required();
  exp->add_flag("--overwrite", export_overwrite, "replace model files already in --out");
  exp->add_flag("--merge-lora", export_merge_lora,
                "a LoRA checkpoint: write each adapted weight as W + (alpha / rank) B A (needed for LoRA checkpoints)");

  gputrain::GenerateOptions gen;
  auto* generate = cli.add_subcommand("generate", "sample text from a trained model, streamed as it is written");
  generate
      ->add_option("model", gen.where,
                   "a run's output folder or a checkpoint (newest complete one), or a Hugging Face model folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  generate->add_option("--prompt", gen.prompt, "the text to continue; - reads it from stdin")->required();
  generate->add_option("--max-new-tokens", gen.max_new_tokens, "stop after this many new tokens")
      ->capture_default_str()
      ->check(kCount);
  generate->add_option("--temperature", gen.sampling.temperature, "0 = greedy (always the most likely token)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  generate->add_option("--top-k", gen.sampling.top_k, "sample among the k most likely tokens; 0 = all")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  generate->add_option("--top-p", gen.sampling.top_p, "sample among the most likely tokens whose probability reaches p")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  generate->add_option("--seed", gen.seed, "the sampling seed (the same seed, the same text)")->capture_default_str();
  generate->add_option("--num-samples", gen.num_samples, "samples drawn together (a batch)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  generate->add_option("--device", gen.device, "auto (a GPU when there is one), cpu, cuda, cuda:N")
      ->capture_default_str();
  generate->add_option("--tokenizer", gen.tokenizer.name,
                       "bytes, gpt2 or a tokenizer path (default: the model's: its folder's files, or what its data "
                       "was prepared with)");
  generate->add_option("--vocab", gen.tokenizer.vocab_path, "gpt2: encoder.json");
  generate->add_option("--merges", gen.tokenizer.merges_path, "gpt2: vocab.bpe");
  generate->add_flag("--json", gen.json, "print one JSON object (text, token ids, why each sample stopped)");

  gputrain::EvalCommandOptions ev;
  app::LaunchArgs eval_launch;
  auto* eval = cli.add_subcommand("eval", "loss, perplexity and bits per byte of a trained model over a whole dataset");
  eval->add_option("model", ev.where,
                   "a run's output folder or a checkpoint (newest complete one), or a Hugging Face model folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  eval->add_option("--data", ev.data, "a text file or token shards (a glob in quotes); default: the run's data.eval");
  eval->add_option("--format", ev.format, "auto = token shards when the path ends in .bin, else text")
      ->check(CLI::IsMember({"auto", "text", "tokens"}))
      ->capture_default_str();
  eval->add_option("--batch-size", ev.batch_size, "windows per forward; 0 = the run's train.per_device_batch_size")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  eval->add_option("--device", ev.device, "auto (a GPU when there is one), cpu, cuda, cuda:N")->capture_default_str();
  eval->add_option("--tokenizer", ev.tokenizer.name, "for bits per byte: bytes, gpt2 or a path (default: the model's)");
  eval->add_option("--vocab", ev.tokenizer.vocab_path, "gpt2: encoder.json");
  eval->add_option("--merges", ev.tokenizer.merges_path, "gpt2: vocab.bpe");
  eval->add_option("--out", ev.out, "also write the JSON result to this file");
  eval->add_option("--nproc-per-node", eval_launch.nproc_per_node, "start this many processes, each reading a share")
      ->check(CLI::Range(1, 1024));

  gputrain::SweepOptions sw;
  auto* sweep = cli.add_subcommand("sweep", "a hyperparameter search: a run per trial, a ranked table and a report");
  sweep->add_option("recipe", sw.recipe, "recipe YAML file (default: the built-in quickstart)");
  sweep->add_option("--set", sw.sets, "override a key in every trial (repeatable)")->type_name("KEY=VALUE");
  sweep
      ->add_option("--grid", sw.grid,
                   "a key's values, e.g. --grid optim.lr=[1e-3,3e-3] (repeatable: every combination)")
      ->type_name("KEY=[V,...]");
  sweep
      ->add_option("--random", sw.random,
                   "N random trials instead of the grid: --range draws, --grid lists picked from")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  sweep->add_option("--range", sw.ranges, "with --random: KEY=LO:HI (uniform), LO:HI:log (log-uniform) or LO:HI:int")
      ->type_name("KEY=LO:HI[:log|:int]");
  sweep->add_option("--seed", sw.seed, "the random trials' draws")->capture_default_str();
  sweep->add_option("--parallel", sw.parallel, "trials at once, sharing the cores (run.threads) or the GPUs")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  sweep->add_option("--out", sw.out, "the sweep's folder (default: sweeps/<run.name>); rerun to continue it");

  std::vector<std::string> report_runs;
  std::string report_out = "report.html";
  auto* report = cli.add_subcommand(
      "report", "one self-contained HTML page with charts of runs' metrics, their summaries and recipe differences");
  report->add_option("runs", report_runs, "runs' output folders (several are overlaid)")
      ->required()
      ->check(CLI::ExistingDirectory);
  report->add_option("-o,--out", report_out, "the HTML file to write")->capture_default_str();

  std::string shell;
  auto* completion = cli.add_subcommand(
      "completion", "print shell completion (commands, flags, --set keys): source it, or see docs/install.md");
  completion->add_option("shell", shell, "bash or zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));

  if (const std::string wrong = command_error(cli, argc, argv); !wrong.empty()) {
    std::fprintf(stderr, "error: %s\n", wrong.c_str());
    return 2;
  }
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {
    cli.exit(e);
    return 2;
  }

  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  try {
    if (*run) return app::cmd_run(run_args, output_dir, overwrite, dry_run, launch);
    if (*plan) return app::cmd_plan(plan_args, plan_world);
    if (*validate) return app::cmd_validate(validate_args);
    if (*print) return app::cmd_print_config(print_args, format, reference, json_schema);
    if (*report) return app::cmd_report(report_runs, report_out);
    if (*generate) return app::cmd_generate(gen);
    if (*eval) return app::cmd_eval(ev, eval_launch);
    if (*sweep) return app::cmd_sweep(sw);
    if (*completion) {
      std::fputs(app::completion_script(cli, shell).c_str(), stdout);
      return 0;
    }
    if (*prepare) {
      prep.tokenizer.name = tokenizer;
      prep.chunk_bytes = static_cast<size_t>(chunk_kb) << 10;
      prep.chat = doc_format == "chat";
      prep.documents = documents == "lines"        ? gputrain::DocumentUnit::kLine
                       : documents == "paragraphs" ? gputrain::DocumentUnit::kParagraph
                                                   : gputrain::DocumentUnit::kFile;
      prep.input_format = input_format == "text"    ? gputrain::InputFormat::kText
                          : input_format == "jsonl" ? gputrain::InputFormat::kJsonl
                                                    : gputrain::InputFormat::kAuto;
      prep.progress = progress == "bar"     ? gputrain::ProgressStyle::kBar
                      : progress == "lines" ? gputrain::ProgressStyle::kLines
                      : progress == "off"   ? gputrain::ProgressStyle::kOff
                                            : gputrain::ProgressStyle::kAuto;
      return app::cmd_data_prepare(prep);
    }
    if (*bench) return app::cmd_data_bench(bench_args, bench_workers, bench_batches);
    if (*optim_bench) return app::cmd_optim_bench(optim_bench_args, optim_bench_steps);
    if (*kernels_bench) return app::cmd_kernels_bench(kernels_bench_args, kernels_bench_repeats);
    if (*exp)
      return app::cmd_export(export_checkpoint, export_format, export_out, export_overwrite, export_merge_lora,
                             export_shard_size, export_dtype);
  } catch (const gputrain::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return gputrain::exit_code_for(e.kind());
  } catch (const std::exception& e) {  // LibTorch (c10::Error), std::bad_alloc, ...
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 2;
}
