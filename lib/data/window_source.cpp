#include "data/window_source.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "data/mixture.h"
#include "data/preference_pairs.h"
#include "data/rng.h"
#include "data/synthetic_language.h"
#include "data/token_windows.h"
#include "util/error.h"

namespace gputrain {

void require_document_start(bool needed, bool known, const std::string& key) {
  if (needed && !known)
    throw data_error(key +
                     ": packing documents or padded, mask_document_boundaries and document_attention need the "
                     "end-of-document (document-start) id, and no sidecar gives it\n    fix: set " +
                     key + ".eot_token (GPT-2: 50256), or prepare the data with `gputrain data prepare`");
}
namespace {

class MarkovSource : public WindowSource {
 public:
  MarkovSource(const SyntheticSettings& s, int64_t vocab)
      : lang_(vocab, s.order, s.branching, static_cast<uint64_t>(s.seed)), s_(s) {}
  int64_t window_count() const override { return 0; }
  int64_t fill_window(uint64_t key, int64_t len, int64_t* out) const override {
    DataRng rng(key);
    if (len >= lang_.order()) {
      lang_.generate(rng, len, out);
    } else {
      std::vector<int64_t> tmp(lang_.order());
      lang_.generate(rng, lang_.order(), tmp.data());
      std::memcpy(out, tmp.data(), len * sizeof(int64_t));
    }
    return len;
  }
  std::string describe() const override {
    return "synthetic markov language (vocab " + std::to_string(lang_.vocab()) + ", order " + std::to_string(s_.order) +
           ", branching " + std::to_string(s_.branching) + ", seed " + std::to_string(s_.seed) + ")";
  }
  std::optional<double> entropy_floor(int64_t seq_len) const override { return lang_.entropy_floor(seq_len); }

 private:
  MarkovLanguage lang_;
  SyntheticSettings s_;
};

class UniformSource : public WindowSource {
 public:
  explicit UniformSource(int64_t vocab) : vocab_(vocab) {}
  int64_t window_count() const override { return 0; }
  int64_t fill_window(uint64_t key, int64_t len, int64_t* out) const override {
    DataRng rng(key);
    for (int64_t i = 0; i < len; ++i) out[i] = static_cast<int64_t>(rng.below(vocab_));
    return len;
  }
  std::string describe() const override { return "uniform random tokens (vocab " + std::to_string(vocab_) + ")"; }
  std::optional<double> entropy_floor(int64_t) const override { return std::log(static_cast<double>(vocab_)); }

 private:
  int64_t vocab_;
};

}  // namespace

std::unique_ptr<WindowSource> make_window_source(const DataSourceSettings& d, const ModelSettings& m,
                                                 const std::string& key) {
  switch (d.format) {
    case DataFormat::kSynthetic: {
      int64_t vocab = d.synthetic.vocab == 0 ? m.vocab_size : d.synthetic.vocab;
      if (d.synthetic.kind == SyntheticKind::kUniform) return std::make_unique<UniformSource>(vocab);
      return std::make_unique<MarkovSource>(d.synthetic, vocab);
    }
    case DataFormat::kTokens:
    case DataFormat::kText:
      if (!d.mixture.empty()) return std::make_unique<MixtureWindows>(d, m, key);
      return std::make_unique<TokenWindows>(d, m, key);
    case DataFormat::kPreference:
      return std::make_unique<PreferencePairs>(d.paths.at(0), m, key, d.shared_prompt, d.pack_pairs);
    case DataFormat::kNone:
      break;
  }
  throw runtime_error("make_window_source: data format none has no windows");
}

void check_data_sources(const Settings& s) {
  make_window_source(s.data.train, s.model, "data.train");
  if (s.data.eval.format != DataFormat::kNone) make_window_source(s.data.eval, s.model, "data.eval");
}

}  // namespace gputrain
