#include "data/hf_tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "data/added_tokens.h"
#include "data/bpe_model.h"
#include "data/pre_tokenizer.h"
#include "data/pretokenize.h"
#include "data/special_token_config.h"
#include "data/text_normalizer.h"
#include "data/token_decoder.h"
#include "data/utf8_repair.h"
#include "util/crc32c.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {
namespace {

using nlohmann::json;

// The special ids the post-processor puts before and after a single sequence.
struct Template {
  std::vector<uint32_t> before, after;
};

void read_post_processor(const json& j, const JsonPlace& place, Template& t) {
  if (j.is_null()) return;
  const std::string type = component_type(j, place);
  const JsonPlace here = place.child(" (" + type + ")");
  if (type == "ByteLevel") return;
  if (type == "TemplateProcessing") {
    const auto& single = array_field(j, "single", here);
    const json specials = j.value("special_tokens", json::object());
    bool seen_sequence = false;
    for (const auto& item : single) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const std::string id = item.contains("SpecialToken") ? item["SpecialToken"].value("id", "") : "";
      if (id.empty() || !specials.contains(id) || !specials[id].contains("ids") || !specials[id]["ids"].is_array())
        bad_field(here, "single", "holds " + item.dump() + ", which is not a special token listed in special_tokens");
      for (const auto& v : specials[id]["ids"]) (seen_sequence ? t.after : t.before).push_back(v.get<uint32_t>());
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto id_of = [&](const char* key) {
      const json& v = j.value(key, json());
      if (!v.is_array() || v.size() != 2 || !v[1].is_number_unsigned()) bad_field(here, key, "is not [\"token\", id]");
      return v[1].get<uint32_t>();
    };
    t.before.push_back(id_of("cls"));
    t.after.push_back(id_of("sep"));
    return;
  }
  if (type == "Sequence") {
    const auto& list = array_field(j, "processors", here);
    for (size_t i = 0; i < list.size(); ++i)
      read_post_processor(list[i], place.child(".processors[" + std::to_string(i) + "]"), t);
    return;
  }
  refuse_component(here, "post-processor",
                   "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence");
}

class HfTokenizer : public Tokenizer {
 public:
  HfTokenizer(const std::string& path, const TokenizerSpec& spec);
  std::string kind() const override { return "tokenizer.json"; }
  std::string name() const override { return path_; }
  std::string file_crc32c() const override { return crc_; }
  int64_t vocab_size() const override { return vocab_size_; }
  const DocumentFraming& framing() const override { return framing_; }
  std::optional<uint32_t> special_id(const std::string& text) const override {
    auto it = added_by_text_.find(text);
    return it == added_by_text_.end() ? std::nullopt : std::optional<uint32_t>(it->second);
  }
  std::unique_ptr<TokenEncoder> make_encoder() const override;
  std::string decode(std::span<const uint32_t> ids) const override;
  size_t safe_split_point(std::string_view text, size_t target, size_t window) const override {
    return cut_like_gpt2_ ? gputrain::safe_split_point(text, target, window) : std::string_view::npos;
  }

  // Appends the ids of `text` (valid UTF-8) to `out`; `cache` keeps merged words. `document_start`:
  // the text begins a document (where Metaspace's "first" scheme prepends its marker).
  void encode(std::string_view text, std::vector<uint32_t>& out,
              std::unordered_map<std::string, std::vector<uint32_t>>& cache, bool document_start = true) const;

 private:
  std::optional<uint32_t> id_of(const std::string& token) const;
  void encode_text(std::string_view text, bool at_start, std::vector<uint32_t>& out,
                   std::unordered_map<std::string, std::vector<uint32_t>>& cache) const;

  std::string path_, crc_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<TextNormalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<TokenDecoder> decoder_;
  std::unordered_map<uint32_t, std::string> added_by_id_;
  std::unordered_map<std::string, uint32_t> added_by_text_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;  // non-special added tokens
  int64_t vocab_size_ = 0;
  DocumentFraming framing_;
  bool cut_like_gpt2_ = false;
};

class HfEncoder : public TokenEncoder {
 public:
  explicit HfEncoder(const HfTokenizer& t) : t_(t) {}
  void encode(std::string_view text, std::vector<uint32_t>& out) override { encode_at(text, out, true); }
  void encode_continuation(std::string_view text, std::vector<uint32_t>& out) override { encode_at(text, out, false); }

 private:
  void encode_at(std::string_view text, std::vector<uint32_t>& out, bool document_start) {
    if (cache_.size() > (1 << 20)) cache_.clear();  // bounded memory on endless vocabularies
    t_.encode(repair_utf8(text, scratch_), out, cache_, document_start);
  }

  const HfTokenizer& t_;
  std::string scratch_;
  std::unordered_map<std::string, std::vector<uint32_t>> cache_;
};

HfTokenizer::HfTokenizer(const std::string& path, const TokenizerSpec& spec)
    : path_(std::filesystem::absolute(path).lexically_normal().string()) {
  const std::string text = read_text_file(path, "tokenizer.json");
  Crc32c crc;
  crc.update(text.data(), text.size());
  crc_ = crc.hex();
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw data_error("tokenizer.json '" + path + "' is not valid JSON: " + e.what() +
                     "\n    fix: pass the tokenizer.json of a Hugging Face model (a Git LFS pointer is not the file)");
  }
  if (!j.is_object() || !j.contains("model"))
    throw data_error(
        "tokenizer.json '" + path +
        "' has no \"model\"\n    fix: pass a tokenizer.json written by the Hugging Face tokenizers library");
  const JsonPlace root{path, ""};
  const json& model = j["model"];
  const std::string type = model.is_object() ? model.value("type", "BPE") : "";
  if (type != "BPE")
    refuse_component(root.child("model (" + (type.empty() ? model.dump() : type) + ")"), "model",
                     "BPE; for a SentencePiece Unigram model pass its tokenizer.model");
  model_ = std::make_unique<BpeModel>(model, root.child("model (BPE)"));
  normalizer_ = make_normalizer(j.value("normalizer", json()), root.child("normalizer"));
  pre_tokenizer_ = make_pre_tokenizer(j.value("pre_tokenizer", json()), root.child("pre_tokenizer"));
  decoder_ = make_decoder(j.value("decoder", json()), root.child("decoder"));
  Template tmpl;
  read_post_processor(j.value("post_processor", json()), root.child("post_processor"), tmpl);

  vocab_size_ = model_->id_limit();
  std::vector<AddedToken> raw, normalized;
  const json added = j.value("added_tokens", json::array());
  for (size_t i = 0; i < added.size(); ++i) {
    const JsonPlace here = root.child("added_tokens[" + std::to_string(i) + "]");
    const json& a = added[i];
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") ||
        !a["content"].is_string())
      bad_field(here, "", "is not {\"id\": N, \"content\": \"...\", ...}");
    AddedToken t{a["id"].get<uint32_t>(),
                 a["content"].get<std::string>(),
                 bool_field(a, "special", here, false),
                 bool_field(a, "normalized", here, false),
                 bool_field(a, "lstrip", here, false),
                 bool_field(a, "rstrip", here, false),
                 bool_field(a, "single_word", here, false)};
    vocab_size_ = std::max<int64_t>(vocab_size_, t.id + 1);
    added_by_id_[t.id] = t.content;
    added_by_text_[t.content] = t.id;
    if (!t.special && !t.content.empty()) (t.normalized ? normalized : raw).push_back(std::move(t));
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw));
  normalized_matcher_ = AddedTokenMatcher(std::move(normalized));
  cut_like_gpt2_ = !normalizer_ && pre_tokenizer_ && pre_tokenizer_->splits_like_gpt2() && raw_matcher_.empty() &&
                   normalized_matcher_.empty();

  // Framing: BOS from the template (or tokenizer_config.json), EOS from the config or the template.
  const SpecialTokenTexts names = special_token_texts(path, spec);
  auto special_id = [&](const std::optional<std::string>& text, const char* what) -> int64_t {
    if (!text) return -1;
    auto id = id_of(*text);
    if (!id)
      throw data_error("tokenizer '" + path + "': the " + what + " token \"" + *text +
                       "\" (from tokenizer_config.json or --" + what + "-token) is not in its vocabulary" +
                       "\n    fix: name a token of this tokenizer, e.g. one of its added_tokens");
    return *id;
  };
  int64_t bos = names.bos ? special_id(names.bos, "bos") : tmpl.before.empty() ? -1 : int64_t{tmpl.before.front()};
  int64_t eos = names.eos ? special_id(names.eos, "eos") : tmpl.after.empty() ? -1 : int64_t{tmpl.after.back()};
  if (eos < 0)  // no config: the end-of-text tokens of the families we know
    for (const char* known : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
      if (auto id = id_of(known); id && added_by_id_.count(*id)) {
        eos = *id;
        break;
      }
  const bool adds_bos = names.add_bos.value_or(!tmpl.before.empty());
  framing_ = frame_documents(adds_bos, bos, eos, names.pad ? special_id(names.pad, "pad") : -1,
                             "tokenizer.json '" + path + "'");
}

std::optional<uint32_t> HfTokenizer::id_of(const std::string& token) const {
  auto it = added_by_text_.find(token);
  if (it != added_by_text_.end()) return it->second;
  return model_->id_of(token);
}

void HfTokenizer::encode_text(std::string_view text, bool at_start, std::vector<uint32_t>& out,
                              std::unordered_map<std::string, std::vector<uint32_t>>& cache) const {
  std::vector<TextSegment> segments{{std::string(text), at_start}};
  if (pre_tokenizer_) pre_tokenizer_->split(segments);
  for (const auto& s : segments) {
    if (s.text.size() > 256) {  // long pieces (whole lines under Metaspace) are not worth caching
      model_->encode_word(s.text, out);
      continue;
    }
    auto it = cache.find(s.text);
    if (it == cache.end()) {
      std::vector<uint32_t> ids;
      model_->encode_word(s.text, ids);
      it = cache.emplace(s.text, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

void HfTokenizer::encode(std::string_view text, std::vector<uint32_t>& out,
                         std::unordered_map<std::string, std::vector<uint32_t>>& cache, bool document_start) const {
  std::vector<AddedTokenMatcher::Part> raw_parts, parts;
  raw_matcher_.split(text, raw_parts);
  for (const auto& rp : raw_parts) {
    if (rp.id >= 0) {
      out.push_back(static_cast<uint32_t>(rp.id));
      continue;
    }
    const bool at_start = document_start && rp.text.data() == text.data();
    std::string normalized(rp.text);
    if (normalizer_) normalizer_->apply(normalized);
    parts.clear();
    normalized_matcher_.split(normalized, parts);
    for (const auto& p : parts) {
      if (p.id >= 0) {
        out.push_back(static_cast<uint32_t>(p.id));
      } else {
        encode_text(p.text, at_start && p.text.data() == normalized.data(), out, cache);
      }
    }
  }
}

std::unique_ptr<TokenEncoder> HfTokenizer::make_encoder() const { return std::make_unique<HfEncoder>(*this); }

std::string HfTokenizer::decode(std::span<const uint32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) {
      tokens.push_back(it->second);
    } else if (const std::string* t = model_->token_of(id)) {
      tokens.push_back(*t);
    } else {
      throw data_error("token id " + std::to_string(id) + " is not in the vocabulary of '" + path_ + "'");
    }
  }
  if (decoder_) decoder_->apply(tokens);
  std::string s;
  for (const auto& t : tokens) s += t;
  return s;
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path, const TokenizerSpec& spec) {
  return std::make_unique<HfTokenizer>(path, spec);
}

}  // namespace gputrain
