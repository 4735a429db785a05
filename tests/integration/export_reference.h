// The reference for a CLI export: transformers loads the exported folder
// (tests/reference/hf_interop.py) and its logits must equal those of the
// checkpoint's model as gputrain builds it, on the same random tokens; and the
// helpers the Hugging Face tests share around that script.
#pragma once
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/model_files.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/safetensors.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "model/gpt.h"
#include "test_util.h"
#include "util/text_file.h"

namespace gputrain::test {

inline std::string interop_script() { return std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/hf_interop.py"; }

// `args` through tests/reference/hf_interop.py; REQUIREs success, returns its output.
inline std::string hf_interop(const std::vector<std::string>& args) {
  std::vector<std::string> all = {interop_script()};
  all.insert(all.end(), args.begin(), args.end());
  const CommandResult r = run_python(all);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// `model`'s logits on `tokens` in eval mode, the vocabulary's padding rows cut.
inline torch::Tensor logits_of(Gpt& model, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  model->eval();
  return model->forward(tokens).narrow(-1, 0, model->cfg.vocab_size);
}

// `checkpoint` is the step_<N> directory that `hf_dir` was exported from (LoRA adapters merged).
inline void check_export_logits(const std::filesystem::path& checkpoint, const std::string& hf_dir,
                                const std::string& architecture) {
  const Settings s = settings_from_saved_recipe(read_text_file(checkpoint / "recipe.yaml"),
                                                (checkpoint / "recipe.yaml").string(), architecture_rules());
  ModelSettings plain = s.model;
  plain.lora.rank = 0;  // the export holds the merged weights
  Gpt model(plain);
  load_module_weights(*model, checkpoint_plain_weights(checkpoint, s), checkpoint.string(), "");
  model->eval();
  const TempDir dir;
  const auto tokens = at::randint(0, plain.vocab_size, {2, plain.seq_len}, at::kLong);
  write_safetensors(dir.file("tokens.safetensors"), {{"tokens", tokens}});
  auto r = run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/hf_interop.py", "logits", hf_dir,
                       dir.file("tokens.safetensors"), dir.file("logits.safetensors")});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains(architecture));
  const torch::Tensor theirs = *read_safetensors(dir.file("logits.safetensors")).find("logits");
  torch::Tensor ours;
  {
    torch::NoGradGuard no_grad;
    ours = model->forward(tokens).narrow(-1, 0, plain.vocab_size);
  }
  REQUIRE(theirs.sizes() == ours.sizes());
  CHECK((theirs - ours).abs().max().item<double>() < 1e-4);
  CHECK(ours.abs().max().item<double>() > 0.1);  // not a comparison of near-zeros
}

}  // namespace gputrain::test
