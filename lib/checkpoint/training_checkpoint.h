// Everything a training run needs to continue exactly where it stopped, and
// its on-disk form: one checkpoint directory (checkpoint/checkpoint_dir.h)
// holding
//   model.safetensors      the parameters, by module path, in their training dtype
//   optimizer.safetensors  the optimizer state ("<param>.<slot>", step counters included)
//                          (a parallel run, world size > 1: model.rank<r>.safetensors and
//                          optimizer.rank<r>.safetensors, each written by rank r, of what it holds
//                          (checkpoint/checkpoint_part.h); each file's metadata says its tp rank and
//                          the rows of a ZeRO-3 shard; trainer.json's "tensor_parallel" says how the
//                          parameters are split. Loading joins them whole)
//                          (before: model.tp<r>.safetensors and optimizer.tp<r>.safetensors, still read)
//   rng.safetensors        the CPU (and CUDA) generator states, as bytes
//   trainer.json           counters, the data sampler position, the loss scaler,
//                          the batch split, the resolved settings, for a LoRA run
//                          that saves adapters only its base's fingerprint, and under
//                          model.moe.balance: bias every mixture layer's routing bias
//   recipe.yaml            the resolved recipe, for people
//   manifest.json          every file's size and CRC-32C
// docs/checkpoints.md documents the files for users.
#pragma once
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_part.h"
#include "checkpoint/safetensors.h"
#include "parallel/rank_layout.h"
#include "data/sampler.h"
#include "parallel/tensor_shard.h"
#include "precision/loss_scaler.h"
#include "util/device.h"

namespace gputrain {

// The loop's counters, saved so that a resumed run's summary covers the whole run.
struct TrainingCounters {
  int64_t step = 0;
  int64_t tokens = 0;
  double train_seconds = 0;
  double last_loss = NAN;
  std::optional<double> last_eval;
  int64_t nan_skipped_steps = 0;    // steps train.nan_policy: skip dropped
  int64_t spike_skipped_steps = 0;  // steps whose update train.spike_policy dropped
  int64_t spike_rollbacks = 0;      // rollbacks train.spike_policy: rollback made
  int64_t metrics_bytes = 0;        // metrics.jsonl's length at this step (a resumed run cuts it back here)
};

struct TrainingSnapshot {
  TrainingCounters counters;
  int64_t per_device_batch_size = 0, grad_accum_steps = 0;  // the split the run used (batch size auto)
  SamplerState sampler;
  std::optional<LossScalerState> scaler;  // fp16 only
  RngSnapshot rng;
  nlohmann::ordered_json settings;  // settings_to_json() of the run that saved it
  std::string recipe_yaml;
  std::string optimizer;  // Optimizer::describe(), for people
  // Saving: a single process's whole model and state, or a parallel run's `part` (each rank's own).
  std::vector<NamedTensor> model;            // loaded: whole (every file joined)
  std::vector<NamedTensor> optimizer_state;  // loaded with tp = 1: every rank's joined
  std::optional<CheckpointPart> part;
  // Loaded with tp > 1: tp rank r's state, every dp rank's and stage's joined (the state of a
  // split parameter is split as it is); tp_split says how each parameter is split.
  std::vector<std::vector<NamedTensor>> optimizer_shards;
  std::vector<TensorShard> tp_split;
  // Loaded with a RowShare: MiB of ZeRO-3 optimizer-state row pieces read, and of those kept.
  double optimizer_rows_read_mb = 0, optimizer_rows_kept_mb = 0;
  // LoRA with model.lora.save: adapters: `model` holds the adapters only, and
  // this is the frozen base's fingerprint (model/lora.h); empty = every weight.
  std::string lora_base;
  // model.moe.balance: bias: every mixture layer's routing bias (train/expert_balance.h); null otherwise.
  nlohmann::json expert_bias;
};

// Writes `s` as <root>/step_<counters.step> atomically; returns the directory. With `join`, each
// rank of a parallel run calls it with its own part: the lead (rank 0) writes the rest and commits
// once every rank has written its files; the others return the temporary directory.
std::filesystem::path save_training_checkpoint(const std::filesystem::path& root, const TrainingSnapshot& s,
                                               std::optional<CheckpointJoin> join = {});

// The snapshot's tensors replaced by copies in host memory (checkpoint.async: written while
// training changes the originals).
void copy_to_host(TrainingSnapshot& s);

// What one ZeRO-3 rank keeps of a checkpoint's optimizer state as it reads it: of each row piece
// (a ZeRO-3 checkpoint's) only its rows (parallel/tensor_shard.h rank_rows for dp rank `rank` of
// `size`), and only tp rank `tp_rank`'s files when the checkpoint has `tp_size` tp ranks too (else
// everything, to reshard over tp). Host memory then holds one file and the rank's rows, not the
// whole state once per rank.
struct RowShare {
  int rank = 0, size = 1;
  size_t tp_rank = 0, tp_size = 1;
  ShardBlocks blocks;  // the live run's (parallel/fully_sharded.h zero3_shard_blocks)
};
// The rows the rank of layout `l` keeps: ZeRO-3 over its replicas, else none (nullopt). (Under expert
// parallelism an expert's rows are shared by its replicas, not by the dp group: the state is then read
// whole and cut as it loads.)
std::optional<RowShare> optimizer_row_share(const RankLayout& l, const OptimSettings& o);

// Reads a checkpoint directory written by save_training_checkpoint, after
// verifying its manifest. A missing, incomplete or corrupt checkpoint is a
// DataError naming the directory and what is wrong. `keep`: see RowShare.
// `with_model` false leaves `model` empty: a rank reads its part of the weights itself
// (checkpoint/stored_weights.h), or read_checkpoint_model reads them whole.
TrainingSnapshot load_training_checkpoint(const std::filesystem::path& dir,
                                          const std::optional<RowShare>& keep = std::nullopt, bool with_model = true);

// Whether `dir` looks like a gputrain checkpoint (has trainer.json and model weights).
bool is_training_checkpoint(const std::filesystem::path& dir);

// The whole model of a checkpoint directory (tensor-parallel shards joined), without
// verifying the manifest (the caller has: checkpoint_problem).
std::vector<NamedTensor> read_checkpoint_model(const std::filesystem::path& dir);

// Where a checkpoint's model tensors are, from its files' headers alone (no tensor data is read):
// each file with its tp rank and, for ZeRO-3's row pieces, their rows of that tp rank's tensor.
struct StoredModelFile {
  std::string path;
  SafetensorsHeader header;
  size_t tp_rank = 0;
  std::map<std::string, RowSlice> rows;
};
struct StoredModel {
  size_t tp = 1;
  std::vector<TensorShard> split;  // how the tp ranks' tensors are cut from the whole
  std::vector<StoredModelFile> files;
};
StoredModel checkpoint_model_files(const std::filesystem::path& dir);

}  // namespace gputrain
