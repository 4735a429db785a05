// A trained model for inference (`gputrain generate`, `gputrain eval`): from a run's output folder
// or a checkpoint (its newest complete one; LoRA adapters merged), or from a Hugging Face model
// folder (config.json gives the shapes, as model.init_from does).
#pragma once
#include <filesystem>
#include <optional>

#include "config/settings.h"
#include "model/gpt.h"

namespace gputrain {

struct InferenceModel {
  Settings settings;   // the run's recipe; for a Hugging Face folder, the defaults with its config.json's shapes
  Gpt model{nullptr};  // in eval mode, on the device
  std::filesystem::path source;                    // the checkpoint or the model folder read
  std::optional<std::filesystem::path> hf_folder;  // where the weights came from a Hugging Face folder
  int64_t step = 0;                                // the checkpoint's step (0 for a Hugging Face folder)
  // What the run trained on as its base (QLoRA's 4-bit base; settings.model.quantize is cleared, the
  // merged weights holding that base dequantized): what DPO's reference is rebuilt as.
  QuantizeSettings trained_quantize;
};

// Weights in bfloat16 on a GPU, float32 on the CPU. `quantize` (--quantize): the block Linears then
// kept in 4 bits (bitsandbytes' load_in_4bit: double quantization, blocks of 64; model/quantized_weight.h).
// A bitsandbytes 4-bit folder is kept in 4 bits as it is stored (its codes, as transformers loads it).
// Throws a data Error naming `where` when it is neither, or its files do not fit.
InferenceModel load_inference_model(const std::filesystem::path& where, torch::Device device,
                                    QuantBase quantize = QuantBase::kNone);

}  // namespace gputrain
