// ZeRO stage 3 (fully sharded data parallelism, as FSDP2): each rank r of the dp group keeps rows
// [r*c, (r+1)*c) of every parameter (c = ceil(rows / N), rounded up for ShardBlocks; the last ranks'
// shares padded with zeros). An expert's rows are shared by the ranks holding it (expert parallelism).
// That shard is the tensor the optimizer updates and each rank writes to a checkpoint. The model's own
// parameters become views into one buffer per unit (model/gpt.h UnitHooks: the embeddings, each
// block, the head) whose memory exists only while the unit is in use: all-gathered just before its
// forward (the next unit's gather already in flight), freed after it (parallel.reshard_after_forward),
// gathered again before its backward, and freed once its gradients are reduce-scattered to their
// owners (added to the shards' .grad). Unit 0 is not gathered for its own backward (model/gpt.h
// UnitHooks: it reads no weights). The vocabulary tables (the embedding, the head's weight) are never
// gathered: their rows stay spread and the lookup and the head are computed part by part
// (parallel/vocabulary_parts.h). Unless parallel.reshard_after_forward is off (memory traded for
// speed): they are then gathered as units are, and tied embeddings keep unit 0 whole until the head's
// backward is done.
#pragma once
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "metrics/parallel_reports.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "parallel/communicator.h"
#include "parallel/vocabulary_parts.h"
#include "parallel/tensor_shard.h"
#include "util/named_tensor.h"

namespace gputrain {

// Where ZeRO-3 computes and where it keeps what persists between steps.
struct ShardPlacement {
  torch::Device compute;  // units are gathered to it and computed on it
  // The shards, their gradients and so the optimizer state: `compute`, or the host for
  // parallel.offload_params (pinned, so the host does not wait for the copies to the device).
  torch::Device shards;
  bool reshard_after_forward = true;
  // Defined (bf16 under autocast): units are gathered and computed in it; the model's parameters
  // take that dtype while the fp32 shards stay what the optimizer updates, and gradients are reduced
  // in the shards' dtype.
  std::optional<torch::ScalarType> gather_dtype;
  ShardBlocks blocks;  // the parameters whose shards start on a block (zero3_shard_blocks)
};

// What `o`'s optimizer needs of the shards (its spec's state blocks, optim/optimizer_spec.h):
// adamw8bit's quantized parameters start each shard on one of its quantization blocks; others need nothing.
ShardBlocks zero3_shard_blocks(const OptimSettings& o);

// The group of ranks that hold the same parameter and so share its rows (expert parallelism: an
// expert's replicas), or nullptr where this rank holds it alone (its shard is then the whole).
using ShardGroupOf = std::function<Communicator*(const std::string& parameter)>;

// For a model built on the meta device: fills `shard` (on its device) with rows [first, first + count)
// of parameter `name`, and zeros after them (parallel/initial_parts.h).
using ShardFill = std::function<void(const std::string& name, torch::Tensor& shard, int64_t first, int64_t count)>;

// Frozen storage a unit gathers and frees with its parameters though it is none of the model's
// parameters (QLoRA's 4-bit base, parallel/sharded_4bit_base.h): `whole` is the tensor the model reads
// (whole-shaped; its memory exists only while the unit is gathered), `shard` this rank's rows of it
// [r*c, (r+1)*c), padded, c the same on every rank of `group` (nullptr: this rank's alone). Neither a
// shard nor a checkpoint's: whoever made it makes it again.
struct UnitStorage {
  std::string name;  // in messages
  int64_t unit = 0;
  Communicator* group = nullptr;
  torch::Tensor whole, shard;
};

class FullyShardedModel : public UnitHooks {
 public:
  // `model`'s parameters (whole and equal on every rank of their group: `dp`, or `group_of`'s where
  // given) become shards on `place.shards`. The model may be on the host: only the shards and,
  // while gathered, a unit's weights reach the device, so a model larger than one device's memory
  // trains. The caller installs it as the model's unit hooks.
  // `held`: the parameters this rank holds (a pipeline stage's; frozen ones included), registration order.
  // Those on the meta device (no values yet) get their shards from `fill`. `storage` is gathered with
  // its unit (never cast to the gather dtype).
  FullyShardedModel(Communicator& dp, Gpt& model, const std::vector<NamedTensor>& held, const ShardPlacement& place,
                    ShardGroupOf group_of = {}, const ShardFill& fill = {},
                    const std::vector<UnitStorage>& storage = {});
  ~FullyShardedModel() override;

  // This rank's shards, named as the parameters, frozen ones included, in registration order.
  const std::vector<NamedTensor>& shards() const { return shards_; }
  // The names of each unit's parameters, unit by unit (what an optimizer streamed per unit splits by).
  std::vector<std::vector<std::string>> unit_parameters() const;
  // This rank's part of a tensor laid out as `layout` along parameter `name` (optim/optimizer.h:
  // rows [rank*c, (rank+1)*c), or the blocks of those rows), padded: for optimizer state saved
  // whole, or already cut to this rank's part as it was read (then only padded). The padding is
  // `padding`'s where given and of the shard's shape (the live state: 8-bit codes pad with the
  // code of zero, not 0), else zeros. Scalars and tensors of other parameters come back as they are.
  torch::Tensor shard_of(const std::string& name, const torch::Tensor& whole, StateLayout layout = StateLayout::kRows,
                         const torch::Tensor& padding = {}) const;
  // Whole weights (a checkpoint's, for a spike rollback) copied into this rank's shards: each
  // parameter's rows (a LoRA checkpoint of adapters alone sets those). Throws for a wrong shape.
  void load_whole(const std::vector<NamedTensor>& weights);
  // Every shard filled again in place by `fill` (its rows, as when the model was built on meta).
  void refill(const ShardFill& fill);
  // Parameter `name`'s shard in the dtype units are gathered in, kept in memory from now on: the gathers
  // read it, so the fp32 shard itself may live elsewhere (parallel.offload_optimizer nvme files it with
  // the optimizer state, whose update keeps this copy current). Undefined where the dtypes are the same.
  torch::Tensor keep_gather_copy(const std::string& name);
  // Every such copy set from its shard again, after something other than the update changed the
  // shards (a resume, a rollback).
  void refresh_gather_copies();
  // A tensor laid out as `layout` along parameter `name`'s shard without its padding, and which rows
  // (or blocks) of the whole it is (no communication: each rank writes its own part into a
  // checkpoint). nullopt for others.
  std::optional<RowPiece> own_rows(const std::string& name, const torch::Tensor& shard,
                                   StateLayout layout = StateLayout::kRows) const;

  // After the last micro-batch's backward: every unit's gradients reduced, every unit freed.
  void finish_backward();
  // What an optimizer that reads other rows needs (optim/optimizer.h): each parameter's whole and
  // real rows, and sums over its group.
  RowSharding row_sharding();
  // What an optimizer that needs each matrix whole does with them (optim/optimizer.h): each 2-D
  // parameter's rows over its group, joined without the padding and cut with it.
  MatrixSharding matrix_sharding() const;
  const ShardTraffic& traffic() const { return traffic_; }  // since the start

  // UnitHooks
  void before_forward(int64_t unit) override;
  std::vector<torch::Tensor> after_forward(int64_t unit, std::vector<torch::Tensor> outputs) override;
  torch::Tensor head_token_losses(const torch::Tensor& y, const torch::Tensor& targets) override;
  torch::Tensor head_logits(const torch::Tensor& y) override;
  torch::Tensor embedding_lookup(const torch::Tensor& tokens) override;
  // Called by autograd before unit `unit`'s backward (maybe more than once): the units after it are
  // done (reduced, freed), this one is gathered, and the one before it starts gathering.
  void before_backward(int64_t unit);

 private:
  struct Param {
    std::string name;
    Communicator* group = nullptr;  // the ranks sharing its rows (nullptr: this rank alone)
    torch::Tensor whole;            // the model's parameter: its storage is freed while resharded
    torch::Tensor shard;            // [c, ...]: this rank's rows
    torch::Tensor copy;             // the shard in the gather dtype, where kept (keep_gather_copy): gathered from
    int64_t rows = 0, shard_rows = 0, row_numel = 0;
    int64_t packed_offset = 0;  // in a rank's packed shards of its pack
    int64_t grad_offset = -1;   // in a rank's packed gradient shards (trainable only)
    bool storage = false;       // a UnitStorage: no parameter (not in shards(), never refilled)
    int64_t shard_numel() const { return shard_rows * row_numel; }
  };
  // A unit's parameters of one dtype, gathered and reduced as one flat tensor.
  struct Pack {
    Communicator* group = nullptr;  // its parameters' (nullptr: copied, nothing to communicate)
    std::vector<size_t> params;
    int64_t numel = 0, grad_numel = 0;
    PendingCollective gathering;  // a gather in flight
    bool by_parts = false;        // a vocabulary table used part by part: never gathered or reduced here
    torch::Tensor gather_in, gather_out;
  };
  struct Unit {
    std::vector<Pack> packs;
    bool gathered = false;
    bool in_flight = false;
    bool awaits_backward = false;   // its forward ran with gradients (its gather for backward may start early)
    bool backward_pending = false;  // its backward ran; its gradients not yet reduced
  };
  // Of a tensor laid out as `layout` along q, the units (rows or blocks) along its first dimension:
  // the whole's, the first this rank holds, how many of them are real, and its shard's (padded).
  struct Part {
    int64_t whole = 0, first = 0, count = 0, shard = 0;
  };
  Part own_part(const Param& q, StateLayout layout) const;
  Part part_of(const Param& q, StateLayout layout, int64_t rank) const;  // rank `rank` of q's group's
  // q into unit `unit`'s pack of its dtype and group (`pack_of`: the unit's, by that key; `alone`: a pack of its own).
  using PackKey = std::tuple<torch::ScalarType, Communicator*, size_t>;
  void add_to_unit(size_t unit, Param q, std::map<PackKey, size_t>& pack_of, bool alone, bool by_parts);
  void add_storage(size_t unit, const UnitStorage& st, torch::Device shards, std::map<PackKey, size_t>& pack_of);
  // This rank's part of `whole` (p.whole units long), padded to p.shard with `padding`'s (see shard_of).
  static torch::Tensor cut(const torch::Tensor& whole, const Part& p, const torch::Tensor& padding = {});
  // q's shard of parameter p on `device`: cut from p's values, or from `fill` where p is on meta.
  torch::Tensor first_shard(const Param& q, const torch::Tensor& p, torch::Device device, const ShardFill& fill) const;
  // A pack of one parameter whose rows the ranks split without padding: gathered into its own memory.
  bool gathers_in_place(const Pack& pack) const;
  void start_gather(int64_t unit);
  void gather(int64_t unit);  // waits for a prefetch, or gathers now
  void reshard(int64_t unit);
  void reduce_gradients(int64_t unit);
  void finish_units_after(int64_t unit);  // units > unit whose backward ran
  bool valid(int64_t unit) const { return unit >= 0 && unit < static_cast<int64_t>(units_.size()); }
  int64_t head() const { return static_cast<int64_t>(units_.size()) - 1; }
  // Whether the head multiplies by unit 0's gathered embedding (tied, and not computed by parts).
  bool head_reads_embedding() const { return tied_ && !head_parts_; }
  static const torch::Tensor& gathered_from(const Param& q) { return q.copy.defined() ? q.copy : q.shard; }
  static int rank_in(const Communicator* group) { return group ? group->rank() : 0; }
  static int64_t size_of(const Communicator* group) { return group ? group->size() : 1; }

  static constexpr int64_t kOwnPackBytes = 32 << 20;  // a parameter this large is gathered and reduced alone

  torch::Device compute_;
  bool offloaded_;  // shards on the host, computing on a device
  bool reshard_after_forward_;
  bool tied_;
  int64_t block_;  // ShardBlocks::block
  std::vector<Param> params_;
  std::map<std::string, size_t> by_name_;
  std::vector<Unit> units_;
  std::vector<NamedTensor> shards_;
  // A vocabulary table used part by part: its parameter in params_, and how its rows are spread.
  struct TableParts {
    size_t param;
    VocabularyRows rows;
  };
  std::optional<TableParts> head_parts_, embedding_parts_;
  ShardTraffic traffic_;
};

}  // namespace gputrain
