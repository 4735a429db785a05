#include <spdlog/spdlog.h>

#include <memory>

#include "checkpoint/hf_export.h"
#include "checkpoint/hf_folder.h"
#include "commands.h"
#include "model/architecture.h"

namespace gputrain::app {

namespace {

// `export`'s flags as typed; the format and shard size become ExportOptions when it runs.
struct ExportArgs {
  std::string checkpoint, out, format = "hf", max_shard_size = "5GB";
  ExportOptions options;
};

int export_checkpoint(ExportArgs a) {
  ExportOptions& o = a.options;
  o.format = a.format == "peft" ? ExportFormat::kPeft : ExportFormat::kHf;
  o.max_shard_bytes = parse_shard_size(a.max_shard_size);
  const ExportResult r = export_model(a.checkpoint, a.out, o);
  std::string files;
  for (const std::string& f : r.files) files += (files.empty() ? "" : ", ") + f;
  if (o.format == ExportFormat::kPeft) {
    spdlog::info("exported the LoRA adapters of step {} of {} for PEFT ({}, {}): {} tensors in {}: {}", r.step,
                 r.checkpoint.string(), r.architecture, r.dtype, r.tensors, a.out, files);
    spdlog::info("load it with: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), \"{}\")", a.out);
    return 0;
  }
  spdlog::info("exported step {} of {} as Hugging Face {} ({}){}: {} tensors in {}: {}", r.step, r.checkpoint.string(),
               r.architecture, r.dtype, o.merge_lora ? " with the LoRA adapters merged" : "", r.tensors, a.out, files);
  if (r.tokenizer_from.empty())
    spdlog::warn(
        "no tokenizer files written: the run started from no Hugging Face folder and its data names no "
        "tokenizer file; copy the tokenizer's files into {} for AutoTokenizer",
        a.out);
  else spdlog::info("tokenizer files from {}", r.tokenizer_from);
  spdlog::info("load it with: AutoModelForCausalLM.from_pretrained(\"{}\")", a.out);
  return 0;
}

}  // namespace

void add_export(CLI::App& cli, Commands& commands) {
  auto a = std::make_shared<ExportArgs>();
  auto* cmd = cli.add_subcommand("export", "write a checkpoint's weights for other tools (Hugging Face transformers)");
  cmd->add_option("checkpoint", a->checkpoint,
                  "a checkpoint directory (step_<N>), the directory holding them, or a run's output directory (newest "
                  "complete checkpoint)")
      ->required()
      ->check(CLI::ExistingDirectory);
  std::string hf_classes;
  for (const Architecture* arch : architectures())
    hf_classes +=
        (hf_classes.empty() ? "" : ", ") + std::string(arch->hf.class_name) + " (model.arch " + arch->name + ")";
  cmd->add_option("--format", a->format,
                  "hf = " + hf_classes +
                      ": config.json, safetensors, generation_config.json and tokenizer files; peft = a LoRA "
                      "checkpoint's adapters as adapter_config.json + adapter_model.safetensors")
      ->check(CLI::IsMember({"hf", "peft"}))
      ->capture_default_str();
  cmd->add_option("--max-shard-size", a->max_shard_size,
                  "hf: larger weights are split into shards of at most this size with an index (5GB, 500MB, 2GiB)")
      ->capture_default_str();
  cmd->add_option("--dtype", a->options.dtype, "weights' dtype: auto = as trained (bf16-pure: bfloat16, else float32)")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16", "float16"}))
      ->capture_default_str();
  cmd->add_option("--out", a->out, "directory to write")->required();
  cmd->add_flag("--overwrite", a->options.overwrite, "replace model files already in --out");
  cmd->add_flag("--merge-lora", a->options.merge_lora,
                "a LoRA checkpoint: write each adapted weight as W + (alpha / rank) B A (needed for LoRA checkpoints)");
  commands.push_back({cmd, [a] { return export_checkpoint(*a); }});
}

}  // namespace gputrain::app
