#include "data/tokenizer.h"

#include "data/bpe_tokenizer.h"
#include "util/error.h"

namespace gputrain {
namespace {

class ByteEncoder : public TokenEncoder {
 public:
  void encode(std::string_view text, std::vector<uint32_t>& out) override {
    for (char c : text) out.push_back(static_cast<unsigned char>(c));
  }
};

class ByteTokenizer : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  int64_t vocab_size() const override { return 257; }
  uint32_t eot_id() const override { return 256; }
  std::unique_ptr<TokenEncoder> make_encoder() const override { return std::make_unique<ByteEncoder>(); }
  std::string decode(std::span<const uint32_t> ids) const override {
    std::string s;
    for (uint32_t id : ids) {
      if (id > 256) throw data_error("token id " + std::to_string(id) + " is not a byte-tokenizer id (0..256)");
      if (id < 256) s.push_back(static_cast<char>(id));
    }
    return s;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec) {
  if (spec.name == "bytes") return std::make_unique<ByteTokenizer>();
  if (spec.name == "gpt2") {
    if (spec.vocab_path.empty() || spec.merges_path.empty())
      throw usage_error(
          "the gpt2 tokenizer needs its vocabulary and merges files"
          "\n    fix: pass --vocab path/to/encoder.json --merges path/to/vocab.bpe");
    return std::make_unique<BpeTokenizer>(spec.vocab_path, spec.merges_path);
  }
  throw usage_error("unknown tokenizer '" + spec.name + "'\n    fix: use bytes or gpt2");
}

}  // namespace gputrain
