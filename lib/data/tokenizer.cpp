#include "data/tokenizer.h"

#include <filesystem>

#include "data/bpe_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/pretokenize.h"
#include "data/sentencepiece_tokenizer.h"
#include "util/error.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

class ByteEncoder : public TokenEncoder {
 public:
  void encode(std::string_view text, std::vector<uint32_t>& out) override {
    for (char c : text) out.push_back(static_cast<unsigned char>(c));
  }
};

class ByteTokenizer : public Tokenizer {
 public:
  std::string kind() const override { return "bytes"; }
  std::string name() const override { return "bytes"; }
  int64_t vocab_size() const override { return 257; }
  const DocumentFraming& framing() const override { return framing_; }
  std::unique_ptr<TokenEncoder> make_encoder() const override { return std::make_unique<ByteEncoder>(); }
  std::string decode(std::span<const uint32_t> ids) const override {
    std::string s;
    for (uint32_t id : ids) {
      if (id > 256) throw data_error("token id " + std::to_string(id) + " is not a byte-tokenizer id (0..256)");
      if (id < 256) s.push_back(static_cast<char>(id));
    }
    return s;
  }
  // Bytes never merge, but cutting where GPT-2 would keeps both paths alike.
  size_t safe_split_point(std::string_view text, size_t target, size_t window) const override {
    return gputrain::safe_split_point(text, target, window);
  }

 private:
  DocumentFraming framing_{{256}, {}, -1, 256, -1};
};

// A folder: its tokenizer.json, else its tokenizer.model.
std::string tokenizer_file_in(const std::string& dir) {
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::is_regular_file(fs::path(dir) / name)) return (fs::path(dir) / name).string();
  throw data_error("tokenizer folder '" + dir +
                   "' holds neither tokenizer.json nor tokenizer.model\n    fix: pass the folder of a Hugging Face "
                   "model (or the tokenizer file itself)");
}

}  // namespace

size_t Tokenizer::safe_split_point(std::string_view, size_t, size_t) const { return std::string_view::npos; }

DocumentFraming frame_documents(bool adds_bos, int64_t bos, int64_t eos, int64_t pad, const std::string& where) {
  DocumentFraming f;
  f.bos = bos, f.eos = eos, f.pad = pad;
  if (adds_bos && bos >= 0) {
    f.before.push_back(static_cast<uint32_t>(bos));
    if (eos >= 0) f.after.push_back(static_cast<uint32_t>(eos));
  } else if (eos >= 0) {
    f.before.push_back(static_cast<uint32_t>(eos));
  } else {
    throw data_error(where +
                     " names no end-of-text token, so documents cannot be separated\n    fix: pass --eos-token "
                     "TEXT (the text of its end-of-text token, e.g. \"</s>\")");
  }
  return f;
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec) {
  if (spec.name == "bytes") return std::make_unique<ByteTokenizer>();
  if (spec.name == "gpt2") {
    if (spec.vocab_path.empty() || spec.merges_path.empty())
      throw usage_error(
          "the gpt2 tokenizer needs its vocabulary and merges files"
          "\n    fix: pass --vocab path/to/encoder.json --merges path/to/vocab.bpe");
    return std::make_unique<BpeTokenizer>(spec.vocab_path, spec.merges_path);
  }
  std::error_code ec;
  if (!fs::exists(spec.name, ec))
    throw usage_error("unknown tokenizer '" + spec.name +
                      "': not bytes, not gpt2, and no such file or folder\n    fix: use bytes, gpt2, or the path of a "
                      "tokenizer.json, a SentencePiece .model, or a Hugging Face model folder");
  const std::string file = fs::is_directory(spec.name, ec) ? tokenizer_file_in(spec.name) : spec.name;
  if (fs::path(file).extension() == ".json") return load_hf_tokenizer(file, spec);
  return load_sentencepiece_tokenizer(file, spec);
}

}  // namespace gputrain
