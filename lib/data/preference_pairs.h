// Preference pairs as `gputrain data prepare --format preference` writes them and data format
// preference reads them: for a split (train, val),
//   <split>_pairs.bin   uint32 token ids: each pair's prompt, chosen and rejected completion in turn
//   <split>_pairs.idx   int64 [pairs, 3]: their lengths (prompt, chosen, rejected)
//   <split>_pairs.json  the sidecar: tokenizer, counts, the truncation they were prepared with
// A batch of B pairs (data/loader.h Batch::pairs), right-padded to model.seq_len, targets only on
// completion tokens (TRL's completion mask), is
//  - data.*.shared_prompt (the default): B rows of prompt, chosen, rejected, the prompt computed once.
//    The layout's branches keep the completions apart (util/document_layout.h): the rejected tokens
//    see the prompt and themselves, at the positions after the prompt. The targets are 2B rows over
//    the B rows' logits (row B + i reads row i): chosen first, then rejected, whose first token is
//    predicted at the prompt's last position, as the chosen's is;
//  - else 2B rows, prompt + chosen then prompt + rejected, as TRL's collator makes them.
// data.*.pack_pairs: those rows' sequences one after another in rows of T, without padding between
// them (each its own document: data/loader.h DocumentLayout); Batch::target_rows and
// target_offsets say where each target row's sequence sits.
#pragma once
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/window_source.h"
#include "util/mapped_file.h"

namespace gputrain {

struct PreferencePair {
  std::span<const uint32_t> prompt, chosen, rejected;
};

// What a prepared split's sidecar says.
struct PreferenceSidecar {
  std::string tokenizer, tokenizer_crc32c;
  int64_t vocab_size = 0;
  int64_t pairs = 0, tokens = 0;
  int64_t longest = 0;                            // the longest prompt + completion, in tokens
  int64_t max_length = 0, max_prompt_length = 0;  // 0 = not truncated
  nlohmann::json to_json() const;
  static PreferenceSidecar from_json(const nlohmann::json& j, const std::string& path);
};

// The three file names of a split in `dir`.
std::string pairs_path(const std::string& dir, const std::string& split, const std::string& ext);

// Appends pairs to a split's files; finish() writes the sidecar last (a split without one is incomplete).
class PreferencePairWriter {
 public:
  PreferencePairWriter(std::string dir, std::string split, PreferenceSidecar info);
  void add(const std::vector<uint32_t>& prompt, const std::vector<uint32_t>& chosen,
           const std::vector<uint32_t>& rejected);
  void finish();
  const PreferenceSidecar& info() const { return info_; }

 private:
  std::string dir_, split_;
  PreferenceSidecar info_;
  std::vector<uint32_t> tokens_;
  std::vector<int64_t> lengths_;
};

class PreferencePairs : public WindowSource {
 public:
  // Opens `<dir>/<split>_pairs.bin` and its index and sidecar; `key` (data.train) names the recipe
  // key in errors. Checks the ids fit model.vocab_size and the longest pair model.seq_len.
  PreferencePairs(const std::string& bin_path, const ModelSettings& m, const std::string& key,
                  bool shared_prompt = true, bool pack = false);
  int64_t window_count() const override { return info_.pairs; }
  // A pair's prompt + chosen completion (what a window of it is to generic readers).
  int64_t fill_window(uint64_t key, int64_t len, int64_t* out) const override;
  std::string describe() const override;
  const PreferencePairs* preference() const override { return this; }

  PreferencePair pair(int64_t i) const;
  const PreferenceSidecar& info() const { return info_; }
  bool shared_prompt() const { return shared_prompt_; }
  bool packed() const { return pack_; }  // data.*.pack_pairs
  const std::string& path() const { return path_; }
  // The CRC-32C of the token and index files: what a table of the pairs' reference
  // log-probabilities records, to be read back only for the same pairs.
  std::string data_crc32c() const;

 private:
  std::string path_;
  PreferenceSidecar info_;
  std::unique_ptr<MappedFile> tokens_, index_;
  std::vector<int64_t> offsets_;  // each pair's first token
  bool shared_prompt_, pack_;
};

// The batch of pairs `keys` (see above), rows T long, on the host.
Batch preference_batch(const PreferencePairs& pairs, std::span<const uint64_t> keys, int64_t T,
                       torch::TensorOptions options = torch::kLong);

}  // namespace gputrain
