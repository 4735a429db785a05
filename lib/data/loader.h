// Turns windows into device batches. With data.num_workers > 0, worker threads
// prepare batches ahead (at most data.prefetch) while the model trains, in
// page-locked memory on CUDA so the host-to-device copy is asynchronous.
// Batch k holds samples [first + k B, first + (k + 1) B) of the sampler (with
// shards: [first + (k n + shard) B, ...), so ranks read disjoint parts), so it
// is the same whatever the number of workers, and a loader started at a saved
// sample continues exactly where another left off.
#pragma once
#include <torch/types.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <span>
#include <vector>

#include "data/sampler.h"
#include "data/window_source.h"
#include "util/document_layout.h"

namespace gputrain {

class PreferencePairs;

struct Batch {
  torch::Tensor input;       // [B, T] int64
  torch::Tensor target;      // [B, T] int64, kIgnoreIndex where no loss is taken
  int64_t target_count = 0;  // targets that count toward the loss
  // Where each token sits: under data.*.document_attention its position in its document and the
  // documents' offsets; under context parallelism (parallel/context_parallel.h context_part) the
  // positions of this rank's chunks, in their documents or in the window; else undefined.
  DocumentLayout token_layout;
  // Preference pairs (data format preference, data/preference_pairs.h): target rows [0, pairs) are
  // the chosen completions' next tokens, [pairs, 2 pairs) the rejected's (only completion tokens are
  // targets), each over the input row target_rows names. 0 for other data.
  int64_t pairs = 0;
  const PreferencePairs* pair_source = nullptr;  // preference: the pairs they are of
  torch::Tensor pair_keys;                       // preference: which pairs, [pairs] int64 on the host
  torch::Tensor lengths;  // preference: each target row's real tokens, prompt + completion, [2 pairs] int64
  // preference: the input row each target row's sequence is in, and its first position there, [2 pairs]
  // int64 (data.*.pack_pairs puts several in a row; a shared prompt's two target rows read one).
  torch::Tensor target_rows, target_offsets;
  // preference, set by the objective before the step (ObjectiveSpec::prepare): the chosen sequences'
  // whole-sequence targets (ORPO's NLL), [pairs, T] over their input rows; undefined otherwise.
  torch::Tensor chosen_targets;
  // Filled by the step before the forward: the reference model's summed log-probability of each
  // row's completion, [2 pairs] float32 (train/reference_model.h); the step's units per
  // unit of an objective's second term over every replica (ObjectiveSpec::second_units: ORPO's NLL
  // is a mean over tokens, its odds term a mean over pairs); the objective's metric sums, added to
  // by its loss (ObjectiveSpec::metric_names).
  torch::Tensor reference_logps;
  double second_unit_weight = 0;
  torch::Tensor metric_sums;
};

// What a batch does at document boundaries; both need the source's document-start id.
struct DocumentOptions {
  bool mask_boundaries = false;  // data.*.mask_document_boundaries
  bool attention = false;        // data.*.document_attention: Batch::token_layout
};
// The document options of data.train or data.eval.
DocumentOptions document_options(const DataSourceSettings& d);

struct LoaderOptions {
  int64_t batch_size = 1;
  int64_t seq_len = 1;
  int64_t num_workers = 0;
  int64_t prefetch = 2;
  bool pin_memory = false;  // only used when device is CUDA
  torch::Device device = torch::kCPU;
  DocumentOptions documents;
  // Data parallelism: of each run of `shards` consecutive batches of samples,
  // this loader reads number `shard` (rank r of a world of n reads its share
  // of every global batch). The sample position stays global.
  int64_t shard = 0;
  int64_t shards = 1;
};

// The options a recipe implies for the loader of source `d` (data.train or
// data.eval) with `num_workers` threads.
LoaderOptions loader_options(const Settings& s, const DataSourceSettings& d, torch::Device device, int64_t num_workers);

// The batch of windows `keys` of `source` (inputs the first T tokens of each, targets the next T;
// padding, chat prompts and, with documents.mask_boundaries, cross-document predictions take no
// loss), on the host. With documents.attention, each document starts at the source's document-start
// id (and at a row's start; a row's padding is one more). What every loader batch is, and what
// whole-dataset evaluation reads.
Batch window_batch(const WindowSource& source, std::span<const uint64_t> keys, int64_t T, DocumentOptions documents,
                   torch::TensorOptions options = torch::kLong);
// `b` with its tensors on `device` (asynchronously from page-locked memory): what the loader, whole-set
// evaluation and the reference table hand the model.
Batch batch_on(Batch b, torch::Device device);

class BatchLoader {
 public:
  BatchLoader(const WindowSource& source, const WindowSampler& sampler, LoaderOptions opts, int64_t first_sample = 0);
  ~BatchLoader();  // stops and joins the workers; never blocks on a full queue
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next batch, on the device. Rethrows a worker's error (e.g. a bad token id).
  Batch next();
  // The sampler sample the next batch starts at (what a checkpoint saves).
  int64_t next_sample() const { return first_sample_ + next_index_ * opts_.shards * opts_.batch_size; }

  // Batch `index` (counted from first_sample) on the host; what workers run.
  Batch make_host_batch(int64_t index) const;

 private:
  void worker_loop();

  const WindowSource& source_;
  const WindowSampler& sampler_;
  LoaderOptions opts_;
  int64_t first_sample_;
  int64_t next_index_ = 0;  // next batch handed to the caller

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Batch> ready_;
  int64_t next_claim_ = 0;  // next batch index a worker will prepare
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

}  // namespace gputrain
