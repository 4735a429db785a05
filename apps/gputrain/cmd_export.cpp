#include <spdlog/spdlog.h>

#include "checkpoint/hf_export.h"
#include "checkpoint/hf_folder.h"
#include "commands.h"

namespace gputrain::app {

int cmd_export(const std::string& checkpoint, const std::string& format, const std::string& out, bool overwrite,
               bool merge_lora, const std::string& max_shard_size, const std::string& dtype) {
  ExportOptions o;
  o.format = format == "peft" ? ExportFormat::kPeft : ExportFormat::kHf;
  o.overwrite = overwrite;
  o.merge_lora = merge_lora;
  o.max_shard_bytes = parse_shard_size(max_shard_size);
  o.dtype = dtype;
  const ExportResult r = export_model(checkpoint, out, o);
  std::string files;
  for (const std::string& f : r.files) files += (files.empty() ? "" : ", ") + f;
  if (o.format == ExportFormat::kPeft) {
    spdlog::info("exported the LoRA adapters of step {} of {} for PEFT ({}, {}): {} tensors in {}: {}", r.step,
                 r.checkpoint.string(), r.architecture, r.dtype, r.tensors, out, files);
    spdlog::info("load it with: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), \"{}\")", out);
    return 0;
  }
  spdlog::info("exported step {} of {} as Hugging Face {} ({}){}: {} tensors in {}: {}", r.step, r.checkpoint.string(),
               r.architecture, r.dtype, merge_lora ? " with the LoRA adapters merged" : "", r.tensors, out, files);
  if (r.tokenizer_from.empty())
    spdlog::warn(
        "no tokenizer files written: the run started from no Hugging Face folder and its data names no "
        "tokenizer file; copy the tokenizer's files into {} for AutoTokenizer",
        out);
  else spdlog::info("tokenizer files from {}", r.tokenizer_from);
  spdlog::info("load it with: AutoModelForCausalLM.from_pretrained(\"{}\")", out);
  return 0;
}

}  // namespace gputrain::app
