// Windows over token files (data/token_dataset.h).
//   packing: stream     window i is tokens [i*T, i*T + T + 1) of its shard
//                       (consecutive windows share one token, as the last
//                       target of one is the first input of the next);
//                       windows never cross shard boundaries.
//   packing: documents  each window starts at a document (an end-of-document
//                       token) and holds as many whole documents as fit, plus
//                       the next document's end-of-document token as the last
//                       target; the rest is padding, which takes no loss. A
//                       document longer than a window continues in the next.
//   packing: padded     the same with one document per window (as unpacked
//                       fine-tuning batches are; what packing is measured against).
// data.*.span keeps the [start, end) fraction of the windows, in file order.
#pragma once
#include <memory>

#include "data/token_dataset.h"
#include "data/window_source.h"

namespace gputrain {

struct WindowStats {
  int64_t windows = 0;
  int64_t real_tokens = 0;  // summed over windows, padding excluded
};

class TokenWindows : public WindowSource {
 public:
  TokenWindows(const DataSourceSettings& d, const ModelSettings& m, const std::string& key);
  int64_t window_count() const override { return end_ - begin_; }
  int64_t fill_window(uint64_t index, int64_t len, int64_t* out) const override;
  std::optional<int64_t> eot_token() const override { return data_.eot_token(); }
  bool has_loss_mask() const override { return data_.has_loss_mask(); }
  void fill_mask(uint64_t index, int64_t len, uint8_t* out) const override;
  std::string describe() const override;
  const TokenDataset& dataset() const { return data_; }

 private:
  struct Window {
    int64_t start;
    int32_t shard;
    int32_t length;
  };
  Window window(int64_t global) const;

  TokenDataset data_;
  DataFormat format_;
  Packing packing_;
  bool document_attention_;  // data.*.document_attention (for describe())
  int64_t T_;
  std::vector<int64_t> first_window_;  // stream: index of each shard's first window, plus the total
  std::vector<Window> packed_;         // documents, padded: every window
  int64_t begin_ = 0, end_ = 0;        // the span, in global window indices
  double fill_ = 1.0;                  // documents, padded: real tokens / window capacity
};

}  // namespace gputrain
