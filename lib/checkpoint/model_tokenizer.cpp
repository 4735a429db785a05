#include "checkpoint/model_tokenizer.h"

#include <filesystem>

#include "data/token_dataset.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {
namespace fs = std::filesystem;

namespace {

bool has_tokenizer_files(const fs::path& dir) {
  return fs::exists(dir / "tokenizer.json") || fs::exists(dir / "tokenizer.model");
}

std::string where(const InferenceModel& m) { return std::string("'").append(m.source.string()).append("'"); }

std::unique_ptr<Tokenizer> from_data(const InferenceModel& m, const TokenizerSpec& chosen) {
  const DataSourceSettings& d = m.settings.data.train;
  if (d.format == DataFormat::kText) return make_tokenizer({"bytes"});
  if (d.format == DataFormat::kSynthetic)
    throw usage_error(where(m).append(
        " was trained on synthetic token ids (data.train.format: synthetic), which are no text\n    fix: train on text "
        "or token shards (e.g. configs/llama-shakespeare.yaml), or pass --tokenizer"));
  if (const auto info = first_sidecar(d); info && !info->tokenizer.empty()) {
    if (info->tokenizer != "gpt2") return make_tokenizer({info->tokenizer});
    TokenizerSpec gpt2 = chosen;
    gpt2.name = "gpt2";
    return make_tokenizer(gpt2);  // asks for --vocab and --merges when they are missing
  }
  const fs::path base = m.settings.model.init_from;
  std::error_code ec;
  if (!base.empty() && fs::is_directory(base, ec) && has_tokenizer_files(base)) return make_tokenizer({base.string()});
  throw usage_error(
      where(m).append(" records no tokenizer (its data's sidecars are gone or name none)\n    fix: pass "
                      "--tokenizer bytes|gpt2|PATH (a tokenizer.json, a .model, or a model folder)"));
}

void add_ids(const nlohmann::json& v, std::vector<int64_t>& out) {
  if (v.is_number_integer()) out.push_back(v.get<int64_t>());
  if (v.is_array())
    for (const auto& x : v) add_ids(x, out);
}

}  // namespace

std::unique_ptr<Tokenizer> model_tokenizer(const InferenceModel& m, const TokenizerSpec& chosen) {
  if (!chosen.name.empty()) return make_tokenizer(chosen);
  if (m.hf_folder) {
    if (!has_tokenizer_files(*m.hf_folder))
      throw usage_error(
          where(m).append(" has no tokenizer.json or tokenizer.model\n    fix: pass --tokenizer PATH "
                          "(or bytes, or gpt2 with --vocab and --merges)"));
    return make_tokenizer({m.hf_folder->string()});
  }
  return from_data(m, chosen);
}

std::vector<int64_t> end_of_text_ids(const InferenceModel& m, const Tokenizer& tokenizer) {
  std::vector<int64_t> ids;
  if (m.hf_folder) {
    for (const char* file : {"generation_config.json", "config.json"}) {
      const fs::path p = *m.hf_folder / file;
      if (!fs::exists(p)) continue;
      add_ids(parse_json_file(p, "model file", "use the file save_pretrained wrote")
                  .value("eos_token_id", nlohmann::json()),
              ids);
      if (!ids.empty()) return ids;
    }
  }
  if (tokenizer.framing().eos >= 0) ids.push_back(tokenizer.framing().eos);
  return ids;
}

}  // namespace gputrain
