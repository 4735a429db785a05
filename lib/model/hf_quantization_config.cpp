#include "model/hf_quantization_config.h"

#include "model/quantized_weight.h"

namespace gputrain {
namespace {

// config.json's quantization_config, present: into model.quantize, or refused.
void import_stored_quantization(HfConfigReader& r) {
  const nlohmann::json& q = r.config()["quantization_config"];
  const std::string fix = "init from the unquantized model's folder, or from a bitsandbytes 4-bit one (load_in_4bit)";
  if (!q.is_object()) return r.refuse("has a quantization_config that is not an object", fix);
  const std::string method = q.value("quant_method", std::string());
  const bool four_bit = q.value("load_in_4bit", false) || q.value("_load_in_4bit", false);
  if (method != "bitsandbytes" || !four_bit)
    return r.refuse("holds a model quantized by " + (method.empty() ? std::string("an unnamed method") : method) +
                        (method == "bitsandbytes" ? " in 8 bits" : "") + ", which gputrain does not read",
                    fix);
  const std::string type = q.value("bnb_4bit_quant_type", std::string("fp4"));  // bitsandbytes' default
  if (type != "nf4" && type != "fp4")
    return r.refuse("has bnb_4bit_quant_type '" + type + "' (bitsandbytes has nf4 and fp4)", fix);
  const QuantBase stored = type == "nf4" ? QuantBase::kNf4 : QuantBase::kFp4;
  const bool double_quant = q.value("bnb_4bit_use_double_quant", false);
  QuantizeSettings& m = r.settings().quantize;
  const std::string held = "holds a bitsandbytes " + type + " model" +
                           (double_quant ? " with double quantization" : " without double quantization");
  // A recipe's none reads the 4-bit values dequantized; another type or nesting would misread the codes.
  if (!r.set_by_recipe("model.quantize.base")) {
    m.base = stored;
    r.filled.push_back("model.quantize.base");
  } else if (m.enabled() && m.base != stored) {
    r.problems.push_back({"model.quantize.base",
                          "is " + quant4_type_name(quant4_type(m.base)) + ", but model.init_from's config.json ('" +
                              r.file() + "') " + held,
                          "leave model.quantize.base out (config.json sets it), set it to " + type +
                              ", or none to train on the values dequantized"});
  }
  if (!r.set_by_recipe("model.quantize.double_quant")) {
    m.double_quant = double_quant;
    r.filled.push_back("model.quantize.double_quant");
  } else if (m.enabled() && m.double_quant != double_quant) {
    r.problems.push_back({"model.quantize.double_quant",
                          std::string("is ") + (m.double_quant ? "true" : "false") +
                              ", but model.init_from's config.json ('" + r.file() + "') " + held,
                          std::string("leave model.quantize.double_quant out (config.json sets it), or set it to ") +
                              (double_quant ? "true" : "false")});
  }
}

}  // namespace

void import_hf_quantization(HfConfigReader& r) {
  if (!r.has("quantization_config")) return;
  try {
    import_stored_quantization(r);
  } catch (const nlohmann::json::exception& e) {  // a field of another type
    r.refuse(std::string("has a quantization_config that is not transformers': ") + e.what(),
             "use the config.json save_pretrained wrote");
  }
}

}  // namespace gputrain
