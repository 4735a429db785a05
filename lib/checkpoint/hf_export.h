// `gputrain export`: a checkpoint as a Hugging Face model folder that transformers'
// AutoModelForCausalLM and AutoTokenizer load as is (--format hf), or as a PEFT LoRA adapter
// folder that peft's PeftModel.from_pretrained puts on the base model (--format peft).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace gputrain {

enum class ExportFormat { kHf, kPeft };

struct ExportOptions {
  ExportFormat format = ExportFormat::kHf;
  bool overwrite = false;                    // replace model files already in the folder
  bool merge_lora = false;                   // hf: write W + (alpha / rank) B A for every adapted weight
  uint64_t max_shard_bytes = 5'000'000'000;  // hf: past this, shards and an index (save_pretrained's 5GB)
  std::string dtype = "auto";  // auto (as trained: bfloat16 for bf16-pure, else float32) | float32 | bfloat16 | float16
};

struct ExportResult {
  std::filesystem::path checkpoint;
  int64_t step = 0;
  int64_t tensors = 0;
  std::string architecture;        // the Hugging Face class: GPT2LMHeadModel, LlamaForCausalLM, ...
  std::string dtype;               // as config.json's torch_dtype says
  std::vector<std::string> files;  // written to the folder, in order
  std::string tokenizer_from;      // where the tokenizer files came from ("" = none found)
};

// Writes the folder `out` from the newest complete checkpoint at `where` (a step_<N> folder, the
// folder holding them, or a run's output folder):
//  - hf: config.json (the architecture's, on top of the config.json of the Hugging Face model the run
//    started from, if any; torch_dtype as written), the weights as model.safetensors or shards with
//    model.safetensors.index.json, generation_config.json (the base model's, or bos/eos from the
//    tokenizer), and the tokenizer files of the base model or else of the tokenizer the data was
//    prepared with (the shards' sidecars). A LoRA checkpoint needs merge_lora; a mixture of
//    experts is refused.
//  - peft: adapter_config.json and adapter_model.safetensors, the adapters under the Hugging Face
//    model's module names (our fused q/k/v and gate/up adapters become one per projection: the
//    same A, B's rows split, which is exact).
// Refuses a folder that already holds model files unless `overwrite`; locks `out` while writing;
// a failed export leaves no folder of its own making.
ExportResult export_model(const std::filesystem::path& where, const std::filesystem::path& out,
                          const ExportOptions& options);

// export_model with --format hf and the default options.
ExportResult export_hf(const std::filesystem::path& where, const std::filesystem::path& out, bool overwrite,
                       bool merge_lora_adapters = false);

}  // namespace gputrain
