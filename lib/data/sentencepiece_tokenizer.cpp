#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "data/special_token_config.h"
#include "data/utf8_repair.h"
#include "util/crc32c.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {
namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& path, const TokenizerSpec& spec)
      : path_(std::filesystem::absolute(path).lexically_normal().string()) {
    const std::string bytes = read_text_file(path, "SentencePiece model");
    Crc32c crc;
    crc.update(bytes.data(), bytes.size());
    crc_ = crc.hex();
    const auto status = sp_.LoadFromSerializedProto(bytes);
    if (!status.ok() || sp_.GetPieceSize() == 0)
      throw data_error("'" + path + "' is not a SentencePiece model (" + status.ToString() +
                       ")\n    fix: pass the tokenizer.model of a SentencePiece tokenizer, or a tokenizer.json (a Git "
                       "LFS pointer is not the file)");
    // The normalizer's add_dummy_prefix, seen from outside (the model proto's type is not public).
    std::vector<std::string> pieces;
    dummy_prefix_ = sp_.Encode("a", &pieces).ok() && !pieces.empty() && pieces.front().starts_with("\u2581");
    if (const int space = sp_.PieceToId("\u2581"); sp_.IdToPiece(space) == "\u2581") space_piece_ = space;
    const SpecialTokenTexts names = special_token_texts(path, spec);
    auto id = [&](const std::optional<std::string>& text, int own, const char* what) -> int64_t {
      if (!text) return own;
      const int i = sp_.PieceToId(*text);
      if (sp_.IdToPiece(i) != *text)
        throw data_error("SentencePiece model '" + path + "': the " + what + " token \"" + *text +
                         "\" is not one of its pieces\n    fix: name a piece of this model, e.g. \"" +
                         (own >= 0 ? sp_.IdToPiece(own) : std::string("</s>")) + "\"");
      return i;
    };
    framing_ = frame_documents(names.add_bos.value_or(true), id(names.bos, sp_.bos_id(), "bos"),
                               id(names.eos, sp_.eos_id(), "eos"), id(names.pad, sp_.pad_id(), "pad"),
                               "SentencePiece model '" + path + "'");
  }
  std::string kind() const override { return "sentencepiece"; }
  std::string name() const override { return path_; }
  std::string file_crc32c() const override { return crc_; }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  const DocumentFraming& framing() const override { return framing_; }
  std::optional<uint32_t> special_id(const std::string& text) const override {
    const int id = sp_.PieceToId(text);
    if (sp_.IdToPiece(id) != text || !sp_.IsControl(id)) return std::nullopt;  // control symbols only
    return static_cast<uint32_t>(id);
  }
  std::unique_ptr<TokenEncoder> make_encoder() const override;
  bool adds_dummy_prefix() const { return dummy_prefix_; }
  std::optional<uint32_t> space_piece() const { return space_piece_; }
  std::string decode(std::span<const uint32_t> ids) const override {
    std::vector<int> v;
    for (uint32_t id : ids) {
      if (id >= static_cast<uint32_t>(sp_.GetPieceSize()))
        throw data_error("token id " + std::to_string(id) + " is not in SentencePiece model '" + path_ + "'");
      v.push_back(static_cast<int>(id));
    }
    std::string s;
    sp_.Decode(v, &s);
    return s;
  }

  void encode(std::string_view text, std::vector<uint32_t>& out, std::vector<int>& ids) const {
    ids.clear();
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) throw data_error("SentencePiece model '" + path_ + "' failed to encode: " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

 private:
  std::string path_, crc_;
  bool dummy_prefix_ = true;
  std::optional<uint32_t> space_piece_;
  sentencepiece::SentencePieceProcessor sp_;
  DocumentFraming framing_;
};

class SentencePieceEncoder : public TokenEncoder {
 public:
  explicit SentencePieceEncoder(const SentencePieceTokenizer& t) : t_(t) {}
  void encode(std::string_view text, std::vector<uint32_t>& out) override {
    t_.encode(repair_utf8(text, scratch_), out, ids_);
  }
  // SentencePiece always adds its dummy prefix (one "▁"), and its API cannot leave it out: a leading
  // space in `text` is that prefix, the one case where the continuation's ids are the model's own
  // (a lone space is the "▁" piece itself).
  void encode_continuation(std::string_view text, std::vector<uint32_t>& out) override {
    if (t_.adds_dummy_prefix() && !text.empty() && text.front() == ' ') {
      if (text.size() == 1 && t_.space_piece()) {
        out.push_back(*t_.space_piece());
        return;
      }
      text.remove_prefix(1);
    }
    encode(text, out);
  }

 private:
  const SentencePieceTokenizer& t_;
  std::string scratch_;
  std::vector<int> ids_;
};

std::unique_ptr<TokenEncoder> SentencePieceTokenizer::make_encoder() const {
  return std::make_unique<SentencePieceEncoder>(*this);
}

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path, const TokenizerSpec& spec) {
  return std::make_unique<SentencePieceTokenizer>(path, spec);
}

}  // namespace gputrain
