#include "data/window_source.h"

#include <endian.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "data/mapped_file.h"
#include "data/rng.h"
#include "data/synthetic_language.h"
#include "util/error.h"

namespace gputrain {
namespace {

class MarkovSource : public WindowSource {
 public:
  MarkovSource(const SyntheticSettings& s, int64_t vocab)
      : lang_(vocab, s.order, s.branching, static_cast<uint64_t>(s.seed)), s_(s) {}
  void fill_window(uint64_t seed, int64_t len, int64_t* out) const override {
    DataRng rng(seed);
    if (len >= lang_.order()) return lang_.generate(rng, len, out);
    std::vector<int64_t> tmp(lang_.order());
    lang_.generate(rng, lang_.order(), tmp.data());
    std::memcpy(out, tmp.data(), len * sizeof(int64_t));
  }
  std::string describe() const override {
    return "synthetic markov language (vocab " + std::to_string(lang_.vocab()) + ", order " +
           std::to_string(s_.order) + ", branching " + std::to_string(s_.branching) + ", seed " +
           std::to_string(s_.seed) + ")";
  }
  std::optional<double> entropy_floor(int64_t seq_len) const override { return lang_.entropy_floor(seq_len); }

 private:
  MarkovLanguage lang_;
  SyntheticSettings s_;
};

class UniformSource : public WindowSource {
 public:
  explicit UniformSource(int64_t vocab) : vocab_(vocab) {}
  void fill_window(uint64_t seed, int64_t len, int64_t* out) const override {
    DataRng rng(seed);
    for (int64_t i = 0; i < len; ++i) out[i] = static_cast<int64_t>(rng.below(vocab_));
  }
  std::string describe() const override { return "uniform random tokens (vocab " + std::to_string(vocab_) + ")"; }
  std::optional<double> entropy_floor(int64_t) const override { return std::log(static_cast<double>(vocab_)); }

 private:
  int64_t vocab_;
};

// Windows at random offsets of a memory-mapped file of little-endian token ids
// (1 byte per token for text, 2 or 4 for token files).
class FileSource : public WindowSource {
 public:
  FileSource(const DataSourceSettings& d, const ModelSettings& m)
      : file_(d.path), width_(d.format == DataFormat::kText ? 1 : d.dtype == TokenDtype::kUint16 ? 2 : 4),
        vocab_size_(m.vocab_size), text_(d.format == DataFormat::kText) {
    if (file_.size() % width_ != 0)
      throw data_error("data file '" + d.path + "' has " + std::to_string(file_.size()) +
                       " bytes, not a multiple of the token width " + std::to_string(width_));
    const int64_t count = static_cast<int64_t>(file_.size() / width_);
    begin_ = static_cast<int64_t>(std::floor(static_cast<double>(count) * d.span[0]));
    end_ = static_cast<int64_t>(std::floor(static_cast<double>(count) * d.span[1]));
    if (end_ - begin_ < m.seq_len + 1)
      throw data_error("data file '" + d.path + "': the span holds " + std::to_string(end_ - begin_) +
                       " tokens, fewer than one window (" + std::to_string(m.seq_len + 1) + ")");
  }
  void fill_window(uint64_t seed, int64_t len, int64_t* out) const override {
    DataRng rng(seed);
    const int64_t start = begin_ + static_cast<int64_t>(rng.below(static_cast<uint64_t>(end_ - begin_ - len + 1)));
    const uint8_t* p = file_.data() + start * width_;
    for (int64_t i = 0; i < len; ++i) {
      uint32_t v = 0;
      if (width_ == 1) v = p[i];
      else if (width_ == 2) v = static_cast<uint32_t>(p[2 * i]) | static_cast<uint32_t>(p[2 * i + 1]) << 8;
      else std::memcpy(&v, p + 4 * i, 4), v = le32toh(v);
      // Checked here, per window, instead of scanning the whole file at start.
      if (v >= static_cast<uint64_t>(vocab_size_))
        throw data_error("data file '" + file_.path() + "': token id " + std::to_string(v) + " at token offset " +
                         std::to_string(start + i) + " (byte " + std::to_string((start + i) * width_) +
                         ") is >= model.vocab_size (" + std::to_string(vocab_size_) +
                         ")\n    fix: raise model.vocab_size or check data.*.dtype");
      out[i] = v;
    }
  }
  std::string describe() const override {
    return std::string(text_ ? "byte-level text" : "token file (uint" + std::to_string(8 * width_) + ")") + " '" +
           file_.path() + "', tokens [" + std::to_string(begin_) + ", " + std::to_string(end_) + ")";
  }

 private:
  MappedFile file_;
  int64_t width_;
  int64_t vocab_size_;
  bool text_;
  int64_t begin_ = 0, end_ = 0;
};

}  // namespace

std::unique_ptr<WindowSource> make_window_source(const DataSourceSettings& d, const ModelSettings& m) {
  switch (d.format) {
    case DataFormat::kSynthetic: {
      int64_t vocab = d.synthetic.vocab == 0 ? m.vocab_size : d.synthetic.vocab;
      if (d.synthetic.kind == SyntheticKind::kUniform) return std::make_unique<UniformSource>(vocab);
      return std::make_unique<MarkovSource>(d.synthetic, vocab);
    }
    case DataFormat::kTokens:
    case DataFormat::kText:
      return std::make_unique<FileSource>(d, m);
    case DataFormat::kNone:
      break;
  }
  throw runtime_error("make_window_source: data format none has no windows");
}

}  // namespace gputrain
