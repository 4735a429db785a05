// The optimizer interface every optim.name implements, and what they share:
// parameter groups with a per-group lr scale, freeing gradients, and state
// kept as plain tensors under stable names ("<parameter>.<slot>", e.g.
// "transformer.h.0.attn.c_attn.weight.exp_avg") so checkpoints can save and
// restore it without knowing the optimizer.
#pragma once
#include <torch/types.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "optim/param_groups.h"

namespace gputrain {

// How the update runs: foreach = multi-tensor ATen ops over a group's
// parameters; fused = one pass over memory (our CUDA kernels, or a C++ loop on CPU).
enum class UpdateKernel { kForeach, kFused };

// How a state tensor lines up with its parameter: a ZeRO-3 rank's shard of the parameter holds the
// matching part of a tensor that follows it.
enum class StateLayout {
  kWhole,   // step counters, column statistics: every rank holds them whole
  kRows,    // its first dimension runs along the parameter's (moments)
  kBlocks,  // one element per block of the flattened parameter (8-bit block scales; parallel/tensor_shard.h
            // ShardBlocks)
};

struct StateEntry {
  std::string name;
  torch::Tensor tensor;  // live: loading copies into it
  StateLayout layout = StateLayout::kWhole;
};

// ZeRO-3 (parallel/fully_sharded.h) hands the optimizer each rank's rows of every parameter,
// zero-padded past the whole's. An update that reads other rows (Adafactor's column statistics
// and RMS) sums over the ranks sharing a parameter through its group's `sums` entry (in place;
// every rank of the group makes the same calls, so tensors of one group are summed together).
struct RowShard {
  int64_t whole_rows = 0, real_rows = 0;  // the whole parameter's rows; this shard's that are not padding
  int group = 0;                          // index in RowSharding::sums
};
struct RowSharding {
  std::map<std::string, RowShard> params;  // by parameter name
  std::vector<std::function<void(std::vector<torch::Tensor>&)>> sums;
};

// Tensor parallelism and ZeRO-3 leave each rank a shard of a matrix; an update that needs the whole
// (Muon's iteration) has every rank's shard sent to one owner rank of the group and each rank's part of
// the result sent back (parallel/matrix_sharding.h builds this from the layout).
struct MatrixShards {
  int group = 0;                     // index in MatrixSharding::groups
  std::vector<int64_t> whole_sizes;  // the whole matrix's [rows, cols]
  // The whole from every rank's shard (in rank order), and rank `rank`'s shard of a whole.
  std::function<torch::Tensor(const std::vector<torch::Tensor>& shards)> join;
  std::function<torch::Tensor(const torch::Tensor& whole, int rank)> cut;
};
struct MatrixGroup {
  int rank = 0, size = 1;
  // Starts an all-to-all of flat tensors of one dtype (sends[r] goes to rank r) and returns the call
  // that waits for it: what each rank sent here, receive[r] elements from rank r. Every rank of the
  // group starts the same exchanges in the same order with matching sizes.
  using Arrival = std::function<std::vector<torch::Tensor>()>;
  std::function<Arrival(const std::vector<torch::Tensor>& sends, const std::vector<int64_t>& receive)> start_exchange;
};
struct MatrixSharding {
  std::map<std::string, MatrixShards> params;  // by parameter name; a parameter not here is whole
  std::vector<MatrixGroup> groups;
};

class Optimizer {
 public:
  // Every group names each of its parameters (the state's names derive from them).
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient, at lr * group.lr_scale.
  virtual void step(double lr) = 0;
  // "adamw, fused (CUDA kernel)": for the run log and the summary.
  virtual std::string describe() const = 0;

  // Gradient clipping folded into the update: an optimizer that can multiply
  // the gradients by a coefficient as its one pass reads them (fused AdamW)
  // says so here, and the trainer hands it the clipping coefficient (a 0-dim
  // float32 tensor on the parameters' device, undefined for none) before each
  // step instead of scaling every gradient in a pass of its own.
  virtual bool folds_grad_scale() const { return false; }
  void set_grad_scale(torch::Tensor scale) { grad_scale_ = std::move(scale); }

  // bf16 mixed precision's weight copies (train/weight_copies.h): an
  // optimizer that writes a bf16 copy of an fp32 parameter in the same pass
  // as its update says so, and is handed each parameter's copy to keep current.
  virtual bool writes_bf16_copies() const { return false; }
  // `copy`: a contiguous bfloat16 tensor shaped as `param`, an fp32 parameter
  // of this optimizer's groups (else std::invalid_argument).
  void set_bf16_copy(const torch::Tensor& param, torch::Tensor copy);
  // Whether its update reads other rows of a parameter and so needs set_row_sharding under ZeRO-3
  // (elementwise updates are exact on any rows without it).
  virtual bool takes_row_sharding() const { return false; }
  void set_row_sharding(RowSharding r) { row_sharding_ = std::move(r); }
  // Whether its update needs each matrix whole and so set_matrix_sharding where matrices are sharded.
  virtual bool takes_matrix_sharding() const { return false; }
  void set_matrix_sharding(MatrixSharding m) { matrix_sharding_ = std::move(m); }
  // Whether `param` is one this optimizer updates.
  bool updates(const torch::Tensor& param) const;

  void zero_grad();  // frees the gradients (set_to_none)
  const std::vector<ParamGroup>& groups() const { return groups_; }
  int64_t state_bytes() const;
  // Of it, what stays in memory between steps (less where it lives in a file: optim/streamed_optimizer.h).
  virtual int64_t resident_state_bytes() const { return state_bytes(); }
  // What memory holds of its parameters, whose bytes are `held` (less where they live in a file).
  virtual int64_t resident_parameter_bytes(int64_t held) const { return held; }
  // Where its state lives, for the run log: "" in memory beside the parameters (optim/optimizer_placement.h).
  virtual std::string placement() const { return ""; }
  // The parameters were changed in place by something other than the update (a checkpoint loaded:
  // resume, spike rollback): an optimizer that keeps copies of them refreshes those.
  virtual void parameters_changed() {}

  // Checkpoint hooks. state() lists every state tensor (moments, step counts,
  // quantization scales) in a stable order. load_state() copies saved tensors
  // into them; a missing, extra, mis-shaped or mis-typed entry is a DataError
  // naming it, and nothing is changed unless all entries match.
  const std::vector<StateEntry>& state() const { return state_; }
  // The layouts of the state entries that follow their parameter (StateEntry::layout not kWhole), by name.
  std::map<std::string, StateLayout> state_following_parameters() const;
  void load_state(const std::map<std::string, torch::Tensor>& saved);

 protected:
  // Registers a state tensor for `param_name` and returns it (a 0-dim one is whole whatever `layout` says).
  torch::Tensor add_state(const std::string& param_name, const std::string& slot, torch::Tensor t,
                          StateLayout layout = StateLayout::kRows);
  // Lists `inner`'s state entries as this optimizer's own, in its order (an optimizer that wraps
  // another: checkpoints name and check the same tensors).
  void adopt_state(const Optimizer& inner);
  // A per-parameter step counter (0-dim int64 on the CPU, part of the state).
  torch::Tensor add_step_counter(const std::string& param_name);
  static int64_t& count(const torch::Tensor& step_counter) { return *step_counter.data_ptr<int64_t>(); }
  // set_bf16_copy's copy of `param`, or undefined.
  torch::Tensor bf16_copy_of(const torch::Tensor& param) const;

  std::vector<ParamGroup> groups_;
  torch::Tensor grad_scale_;                       // set_grad_scale's; applied by step() where folds_grad_scale()
  std::optional<RowSharding> row_sharding_;        // ZeRO-3, for an optimizer that takes it
  std::optional<MatrixSharding> matrix_sharding_;  // tp or ZeRO-3, for an optimizer that takes it

 private:
  std::vector<StateEntry> state_;
  std::map<const c10::TensorImpl*, torch::Tensor> bf16_copies_;
};

// The device of the groups' parameters (the first one's; CPU when there are none).
torch::Device device_of(const std::vector<ParamGroup>& groups);

// "fused (CUDA kernel)" / "fused (C++ loop)" / "foreach (ATen multi-tensor ops)".
std::string describe_kernel(UpdateKernel kernel, const std::vector<ParamGroup>& groups);

// Runs `update(params, grads, indices)` over a group's parameters that have
// gradients, all in fp32, in working sets (multi-tensor calls): fp32 parameters
// as they are; bf16 ones as fp32 copies of them and their gradients, written
// back with stochastic rounding afterwards. A set holds up to 2^20 elements on
// the CPU (a tensor larger than that alone); on a GPU, where each op is a
// launch, up to the largest tensor's size. Either way an update's temporaries
// take what updating that tensor alone would, not a copy of every gradient.
// `indices` are positions in group.params, for finding the matching state.
using WorkingSetUpdate = std::function<void(std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& grads,
                                            const std::vector<size_t>& indices)>;
void for_each_fp32_working_set(const ParamGroup& group, const WorkingSetUpdate& update);
// The same with sets of at least `min_elements` on every device (an update that batches across
// tensors: Muon's iteration over same-shaped matrices).
void for_each_fp32_working_set(const ParamGroup& group, const WorkingSetUpdate& update, int64_t min_elements);

// Working sets of up to `budget` elements (a larger tensor alone; indices in group.params; the fp32
// parameters' sets, then the bf16 ones'), and one set in fp32, for an update that overlaps its sets
// (Muon's sharded step).
std::vector<std::vector<size_t>> fp32_working_sets(const ParamGroup& group, int64_t budget);
class Fp32WorkingSet {
 public:
  Fp32WorkingSet(const ParamGroup& group, std::vector<size_t> members);
  std::vector<torch::Tensor> params, grads;  // fp32: the parameters themselves, or copies of bf16 ones
  std::vector<size_t> indices;
  // Writes bf16 parameters' updated copies back (one stochastic rounding); frees the copies.
  void finish();

 private:
  std::vector<torch::Tensor> views_of(const torch::Tensor& flat) const;
  std::vector<torch::Tensor> originals_;
  torch::Tensor flat_params_, flat_grads_;  // defined for bf16 parameters
};

}  // namespace gputrain
