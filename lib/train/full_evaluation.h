// Evaluation over every window of a dataset once, not a sample (`gputrain eval`, train.eval_full):
// the loss per target token, its perplexity, and bits per byte of the text the targets decode to.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

#include "data/loader.h"
#include "data/tokenizer.h"
#include "config/settings.h"
#include "data/window_source.h"

namespace gputrain {

class ForwardBackward;
class ProcessGroups;

struct EvalTotals {
  double loss_sum = 0;  // summed over the objective's units (next-token: nats over the targets)
  int64_t targets = 0;  // targets that take loss
  int64_t units = 0;    // the objective's units (next-token: the targets; preference: the pairs)
  int64_t windows = 0;
  int64_t bytes = -1;  // UTF-8 bytes of the targets' text (special tokens left out); -1 = no tokenizer

  double loss() const { return units > 0 ? loss_sum / static_cast<double>(units) : 0.0; }
  double perplexity() const;
  std::optional<double> bits_per_byte() const;  // loss_sum / ln 2 / bytes
};

struct WindowShare {
  int64_t index = 0;  // this process reads windows index, index + count, index + 2 count, ...
  int64_t count = 1;
};

// This process's share of the windows (preference: the pairs) of `source`, in batches of `batch_size`
// on `device`; `loss_sum(batch)` is the batch's summed loss (the caller's model, precision and
// parallelism), over `units(batch)` units. With `tokenizer`, the targets' bytes are counted too.
EvalTotals evaluate_windows(const WindowSource& source, int64_t seq_len, int64_t batch_size, DocumentOptions documents,
                            torch::Device device, WindowShare share, const Tokenizer* tokenizer,
                            const std::function<double(const Batch&)>& loss_sum,
                            const std::function<int64_t(const Batch&)>& units);

// train.eval_full during training: every window of data.eval once, each replica reading its share
// (`dp` of them) and the sums meeting over the world; the loss per objective unit. `pipelined`: the
// pipeline's replicas each read them all (its evaluation already gathers over the world).
// `fully_sharded`: ZeRO-3, whose every forward gathers on every rank, so the ranks run as many each.
// `units`: set to the units the loss is over, every rank's (not under a pipeline).
double evaluate_every_window(ForwardBackward& passes, const ProcessGroups& groups, const WindowSource& source,
                             const Settings& s, int64_t dp, torch::Device device, bool pipelined, bool fully_sharded,
                             int64_t* units = nullptr);

}  // namespace gputrain
