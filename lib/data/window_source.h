// Where training windows come from. A window is up to seq_len + 1
// consecutive tokens (inputs are the first seq_len, targets the last
// seq_len). Finite sources (token files) have numbered windows the sampler
// shuffles; generated sources (synthetic) have endless windows, each a pure
// function of a 64-bit key. Sources are read-only, so several loader threads
// may fill windows at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "config/settings.h"

namespace gputrain {

class MixtureWindows;
class PreferencePairs;

// Packing documents, padding, mask_document_boundaries and document_attention need the data's
// end-of-document (document-start) id: where `needed` and it is not `known`, a data error naming the
// data key (`key`, e.g. "data.train") and the fix. The one statement of that rule.
void require_document_start(bool needed, bool known, const std::string& key);

class WindowSource {
 public:
  virtual ~WindowSource() = default;
  // Windows in the source; 0 = endless (generated from the key).
  virtual int64_t window_count() const = 0;
  // Writes window `key` (an index below window_count(), or any key for an
  // endless source) to out[0..len) and returns how many tokens are real;
  // positions past that are padding whose values the caller replaces.
  virtual int64_t fill_window(uint64_t key, int64_t len, int64_t* out) const = 0;
  // Chat data (data prepare --format chat): whether each token says if it takes loss, and those
  // flags for window `key` (1 = takes loss), len of them, aligned with fill_window's tokens.
  virtual bool has_loss_mask() const { return false; }
  virtual void fill_mask(uint64_t /*key*/, int64_t /*len*/, uint8_t* /*out*/) const {}
  // The end-of-document id, where the data has one.
  virtual std::optional<int64_t> eot_token() const { return std::nullopt; }
  // One line for the log: what the data is.
  virtual std::string describe() const = 0;
  // The loss no model can beat on this data, in nats/token, where it is known.
  virtual std::optional<double> entropy_floor(int64_t /*seq_len*/) const { return std::nullopt; }
  // A mixture of sources (data/mixture.h), whose sampler interleaves them.
  virtual const MixtureWindows* mixture() const { return nullptr; }
  // Preference pairs (data/preference_pairs.h), whose batches are pairs of rows, not windows.
  virtual const PreferencePairs* preference() const { return nullptr; }
};

// Builds the source of a data.train / data.eval section (`key` names it in
// messages). Opening checks files, headers and sizes and throws a data Error
// naming the file and the fix.
std::unique_ptr<WindowSource> make_window_source(const DataSourceSettings& d, const ModelSettings& m,
                                                 const std::string& key);

// Opens every data source of a recipe, as `run` would, to report data errors
// without training (`gputrain validate`).
void check_data_sources(const Settings& s);

}  // namespace gputrain
