#include "checkpoint/inference_model.h"

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/model_files.h"
#include "checkpoint/expert_biases.h"
#include "checkpoint/module_weights.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "model/moe.h"
#include "model/quantized_weight.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {
namespace fs = std::filesystem;

namespace {

InferenceModel from_hf_folder(const fs::path& dir, torch::Device device, torch::ScalarType dtype) {
  InferenceModel out;
  out.source = dir;
  out.hf_folder = dir;
  ModelSettings& m = out.settings.model;
  m.init_from = dir.string();
  const ModelRules& rules = architecture_rules();
  // As a recipe naming only model.init_from: every shape from config.json.
  const PretrainedImport imported = rules.import_pretrained(m, [](const std::string&) { return false; });
  if (!imported.problems.empty()) {
    const KeyProblem& p = imported.problems.front();
    throw data_error(p.problem + "\n    fix: " + p.fix);
  }
  rules.apply_defaults(m, [&](const std::string& key) {
    return std::find(imported.filled.begin(), imported.filled.end(), key) != imported.filled.end();
  });
  out.model = build_initial_model(out.settings, device, dtype);
  return out;
}

InferenceModel from_checkpoint(const fs::path& where, torch::Device device, torch::ScalarType dtype) {
  InferenceModel out;
  out.source = find_checkpoint(where);
  if (auto problem = checkpoint_problem(out.source))
    throw data_error("checkpoint '" + out.source.string() + "' is not usable: " + *problem +
                     "\n    fix: name another checkpoint");
  const fs::path recipe = out.source / "recipe.yaml";
  out.settings = settings_from_saved_recipe(read_text_file(recipe), recipe.string(), architecture_rules());
  const nlohmann::json state =
      parse_json_file(out.source / "trainer.json", "checkpoint file", "name another checkpoint");
  out.step = state.value("step", int64_t{0});
  const std::vector<NamedTensor> weights = checkpoint_plain_weights(out.source, out.settings);  // LoRA merged
  ModelSettings plain = out.settings.model;
  plain.lora.rank = 0;
  plain.quantize = {};  // a QLoRA run's base is in the merged weights as it trained (4 bits, dequantized)
  out.trained_quantize = out.settings.model.quantize;
  out.settings.model.quantize = {};
  torch::manual_seed(0);
  out.model = Gpt(plain);
  load_module_weights(*out.model, weights, "checkpoint '" + out.source.string() + "'", "name another checkpoint");
  // model.moe.balance: bias: the routing biases the run had reached choose the experts here too.
  if (const auto saved = state.find("moe_expert_bias"); saved != state.end()) {
    auto layers = out.model->mixture_layers();
    for (auto& [block, bias] : read_expert_biases(*saved, plain, out.source.string(), "name another checkpoint"))
      layers.at(block)->expert_bias = bias;
  }
  out.model->to(device, dtype);
  return out;
}

}  // namespace

InferenceModel load_inference_model(const fs::path& where, torch::Device device, QuantBase quantize) {
  const torch::ScalarType dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
  std::error_code ec;
  if (!fs::is_directory(where, ec))
    throw data_error("'" + where.string() + "' is not a folder\n    fix: name a run's output folder, a checkpoint " +
                     "(step_<N>) or a Hugging Face model folder");
  InferenceModel out =
      fs::exists(where / "config.json") ? from_hf_folder(where, device, dtype) : from_checkpoint(where, device, dtype);
  if (quantize != QuantBase::kNone && quantize != out.settings.model.quantize.base)
    out.settings.model.quantize = QuantizeSettings{quantize};
  if (out.settings.model.quantize.enabled()) {  // --quantize, or a bitsandbytes 4-bit folder as it is stored
    out.model->cfg.quantize = out.settings.model.quantize;
    quantize_whole_model(*out.model, stored_4bit_bands(out.model, out.settings.model));
  }
  out.model->eval();
  return out;
}

}  // namespace gputrain
