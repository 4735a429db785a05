#include "parallel/fully_sharded.h"

#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "optim/optimizer_specs.h"
#include "parallel/matrix_sharding.h"
#include "util/error.h"
#include "util/replace_data.h"
#include "util/stopwatch.h"

namespace gputrain {
namespace {

using Clock = SteadyClock;

// A parameter's memory comes and goes while the tensor (and every view autograd saved of it)
// stays: the storage is emptied and later refilled in place, as FSDP does.
void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

// A tensor of this shape and these options whose storage holds no memory yet (a gather fills it):
// allocating and freeing it would raise the allocator's peak in use by its size for nothing.
torch::Tensor unfilled(c10::IntArrayRef sizes, const torch::TensorOptions& options) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::GetAllocator(options.device().type()),
                       /*resizable=*/true);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage),
      c10::DispatchKeySet(
          c10::computeDispatchKey(c10::typeMetaToScalarType(options.dtype()), options.layout(), options.device())),
      options.dtype());
  impl->set_sizes_contiguous(sizes);
  return torch::Tensor(std::move(impl));
}

void allocate_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (s->nbytes() == bytes) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

// A handle on `t`'s memory with its own version counter: filling it does not look, to autograd,
// like an in-place change of the parameter its saved tensors came from.
torch::Tensor writable_alias(const torch::Tensor& t) {
  torch::Tensor alias = torch::empty({0}, t.options().requires_grad(false));
  alias.set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
  return alias;
}

}  // namespace

FullyShardedModel::FullyShardedModel(Communicator& dp, Gpt& model, const std::vector<NamedTensor>& held,
                                     const ShardPlacement& place, ShardGroupOf group_of, const ShardFill& fill,
                                     const std::vector<UnitStorage>& storage)
    : compute_(place.compute),
      offloaded_(place.shards != place.compute),
      reshard_after_forward_(place.reshard_after_forward),
      tied_(model->cfg.tie_embeddings),
      block_(place.blocks.block) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> registered;
  for (const auto& e : held) registered[e.name] = e.tensor;
  const auto unit_names = model->unit_parameter_names();
  units_.resize(unit_names.size());  // a pipeline stage's other units stay empty
  // The vocabulary tables used part by part (parallel/vocabulary_parts.h) where their rows are spread
  // over other ranks too: the embedding, and the head where this rank runs it (tied: the same table).
  auto spread = [&](const std::string& name) {
    return place.reshard_after_forward && registered.count(name) > 0 && size_of(group_of ? group_of(name) : &dp) > 1;
  };
  const std::string embedding = "transformer.wte.weight", head_weight = tied_ ? embedding : "lm_head.weight";
  const bool runs_head = std::any_of(unit_names.back().begin(), unit_names.back().end(),
                                     [&](const std::string& name) { return registered.count(name) > 0; });
  const bool head_by_parts = runs_head && spread(head_weight), embedding_by_parts = spread(embedding);
  for (size_t u = 0; u < unit_names.size(); ++u) {
    std::map<PackKey, size_t> pack_of;
    for (const auto& name : unit_names[u]) {
      if (!registered.count(name)) continue;
      const torch::Tensor& p = registered.at(name);
      // Each parameter's memory is freed and refilled on its own: it must own its storage whole.
      if (p.dim() == 0 || !p.is_contiguous() || p.storage_offset() != 0 ||
          p.storage().nbytes() != static_cast<size_t>(p.numel()) * p.element_size())
        throw runtime_error("parallel.zero 3: parameter '" + name +
                            "' is a scalar or shares its memory with another tensor, which ZeRO-3 cannot shard");
      Param q;
      q.name = name;
      q.group = group_of ? group_of(name) : &dp;
      q.whole = p;
      q.rows = p.size(0);
      q.row_numel = q.rows > 0 ? p.numel() / q.rows : 0;
      q.shard_rows = rank_rows(q.rows, rank_in(q.group), static_cast<int>(size_of(q.group)),
                               place.blocks.row_multiple(name, q.rows, q.row_numel))
                         .shard_rows;
      q.shard = first_shard(q, p, place.shards, fill);
      if (offloaded_) q.shard = q.shard.pin_memory();
      q.shard.set_requires_grad(p.requires_grad());
      // The parameter moves to the device, in the dtype units are computed in (floating weights
      // under a gather dtype), without its memory: a gather fills it.
      const torch::ScalarType dtype =
          place.gather_dtype && p.is_floating_point() ? *place.gather_dtype : p.scalar_type();
      if (p.device() != compute_ || p.scalar_type() != dtype)
        replace_data(q.whole, unfilled(p.sizes(), p.options().device(compute_).dtype(dtype)));
      free_storage(q.whole);
      // A large parameter is a pack of its own, reduced straight from its gradient; a table used by parts too.
      const bool by_parts = (head_by_parts && name == head_weight) || (embedding_by_parts && name == embedding);
      const bool alone = by_parts || q.whole.numel() * q.whole.element_size() >= kOwnPackBytes;
      by_name_[name] = params_.size();
      add_to_unit(u, std::move(q), pack_of, alone, by_parts);
    }
    for (const UnitStorage& st : storage)
      if (st.unit == static_cast<int64_t>(u)) add_storage(u, st, place.shards, pack_of);
  }
  for (auto& b : model->buffers(/*recurse=*/true)) b.set_data(b.to(compute_));
  for (const auto& e : held) shards_.push_back({e.name, params_[by_name_.at(e.name)].shard});
  auto parts_of = [&](bool used, const std::string& name) -> std::optional<TableParts> {
    if (!used) return std::nullopt;
    const size_t i = by_name_.at(name);
    const Param& q = params_[i];
    return TableParts{i, VocabularyRows{q.group, q.rows, q.shard_rows, q.whole.scalar_type(), compute_, &traffic_}};
  };
  head_parts_ = parts_of(head_by_parts, head_weight);
  embedding_parts_ = parts_of(embedding_by_parts, embedding);
}

FullyShardedModel::~FullyShardedModel() = default;

void FullyShardedModel::add_storage(size_t unit, const UnitStorage& st, torch::Device shards,
                                    std::map<PackKey, size_t>& pack_of) {
  Param q;
  q.name = st.name;
  q.group = st.group;
  q.storage = true;
  q.whole = st.whole;
  q.rows = st.whole.size(0);
  q.row_numel = q.rows > 0 ? st.whole.numel() / q.rows : 0;
  q.shard = st.shard.to(shards);
  if (offloaded_) q.shard = q.shard.pin_memory();
  q.shard_rows = q.shard.size(0);
  // On the compute device, in its own dtype (a statistic stays float32 under a bf16 gather), empty until gathered.
  if (q.whole.device() != compute_)
    replace_data(q.whole, unfilled(q.whole.sizes(), q.whole.options().device(compute_)));
  free_storage(q.whole);
  const bool alone = q.whole.numel() * q.whole.element_size() >= kOwnPackBytes;
  add_to_unit(unit, std::move(q), pack_of, alone, /*by_parts=*/false);
}

void FullyShardedModel::add_to_unit(size_t unit, Param q, std::map<PackKey, size_t>& pack_of, bool alone,
                                    bool by_parts) {
  std::vector<Pack>& packs = units_[unit].packs;
  const size_t own = alone ? params_.size() + 1 : 0;
  auto [it, added] = pack_of.emplace(PackKey(q.whole.scalar_type(), q.group, own), packs.size());
  if (added) packs.emplace_back().group = q.group;
  Pack& pack = packs[it->second];
  pack.by_parts = by_parts;
  q.packed_offset = pack.numel;
  pack.numel += q.shard_numel();
  if (q.whole.requires_grad()) {
    q.grad_offset = pack.grad_numel;
    pack.grad_numel += q.shard_numel();
  }
  pack.params.push_back(params_.size());
  params_.push_back(std::move(q));
}

void FullyShardedModel::start_gather(int64_t unit) {
  Unit& u = units_[static_cast<size_t>(unit)];
  if (u.gathered || u.in_flight) return;
  for (Pack& pack : u.packs) {
    if (pack.by_parts) continue;
    std::vector<torch::Tensor> mine;
    for (size_t i : pack.params) mine.push_back(gathered_from(params_[i]).detach().reshape({-1}));
    pack.gather_in = torch::cat(mine).to(params_[pack.params.front()].whole.scalar_type());
    // Offloaded: through pinned memory, so the host queues the copy without waiting for it (it runs
    // on the compute stream, after the kernels queued before it).
    if (offloaded_) pack.gather_in = pack.gather_in.pin_memory().to(compute_, /*non_blocking=*/true);
    if (!pack.group) {  // this rank's alone: its shard is the whole
      pack.gather_out = pack.gather_in;
      continue;
    }
    if (gathers_in_place(pack)) {  // the gather writes the parameter's own memory: no copy after it
      const Param& q = params_[pack.params.front()];
      allocate_storage(q.whole);
      pack.gather_out = writable_alias(q.whole).view({-1});
    } else {
      pack.gather_out = torch::empty({pack.group->size() * pack.numel}, pack.gather_in.options());
    }
    pack.gathering = pack.group->all_gather(pack.gather_out, pack.gather_in, "gathering unit " + std::to_string(unit));
    ++traffic_.gathers;
    traffic_.gathered_mb += static_cast<double>(pack.gather_out.nbytes()) / (1024.0 * 1024.0);
  }
  u.in_flight = true;
}

std::vector<std::vector<std::string>> FullyShardedModel::unit_parameters() const {
  std::vector<std::vector<std::string>> out;
  for (const Unit& u : units_) {
    out.emplace_back();
    for (const Pack& pack : u.packs)
      for (size_t i : pack.params)
        if (!params_[i].storage) out.back().push_back(params_[i].name);
  }
  return out;
}

void FullyShardedModel::gather(int64_t unit) {
  Unit& u = units_[static_cast<size_t>(unit)];
  if (u.gathered) return;
  start_gather(unit);
  torch::NoGradGuard no_grad;
  const auto t0 = Clock::now();
  for (Pack& pack : u.packs) pack.gathering.wait();
  traffic_.gather_wait_s += seconds_since(t0);
  for (Pack& pack : u.packs) {
    if (pack.by_parts) continue;
    const int64_t n = size_of(pack.group);
    const torch::Tensor ranks = pack.gather_out.view({n, pack.numel});
    for (size_t i : gathers_in_place(pack) ? std::vector<size_t>{} : pack.params) {
      const Param& q = params_[i];
      allocate_storage(q.whole);
      const torch::Tensor rows = ranks.narrow(1, q.packed_offset, q.shard_numel())
                                     .reshape({n * q.shard_rows, q.row_numel})
                                     .narrow(0, 0, q.rows);
      writable_alias(q.whole).view({q.rows, q.row_numel}).copy_(rows);
    }
    pack.gather_in = torch::Tensor();
    pack.gather_out = torch::Tensor();
  }
  u.in_flight = false;
  u.gathered = true;
}

void FullyShardedModel::reshard(int64_t unit) {
  Unit& u = units_[static_cast<size_t>(unit)];
  if (u.in_flight) {  // a prefetch nobody used: finish it (every rank started it) and drop it
    for (Pack& pack : u.packs) {
      pack.gathering.wait();
      pack.gather_in = torch::Tensor();
      pack.gather_out = torch::Tensor();
      if (gathers_in_place(pack)) free_storage(params_[pack.params.front()].whole);
    }
    u.in_flight = false;
  }
  if (!u.gathered) return;
  for (const Pack& pack : u.packs)
    for (size_t i : pack.params) free_storage(params_[i].whole);
  u.gathered = false;
}

void FullyShardedModel::reduce_gradients(int64_t unit) {
  torch::NoGradGuard no_grad;
  const auto t0 = Clock::now();
  for (Pack& pack : units_[static_cast<size_t>(unit)].packs) {
    if (pack.grad_numel == 0 || pack.by_parts) continue;  // by parts: its gradient went to its shard
    const int64_t n = size_of(pack.group);
    // Rank r's part holds rows [r*c, (r+1)*c) of each gradient; missing gradients (an expert no
    // token reached) and the padding are zeros. A pack of one gradient without padding is that already.
    const Param& first = params_[pack.params.front()];
    const torch::Tensor& alone = first.whole.grad();
    const bool direct = pack.params.size() == 1 && first.grad_offset == 0 && first.rows == n * first.shard_rows &&
                        alone.defined() && alone.is_contiguous() && alone.scalar_type() == first.shard.scalar_type();
    torch::Tensor in = direct ? alone.view({n, pack.grad_numel})
                              : torch::zeros({n, pack.grad_numel}, first.shard.options().device(compute_));
    for (size_t i : direct ? std::vector<size_t>{} : pack.params) {
      Param& q = params_[i];
      if (q.grad_offset < 0 || !q.whole.grad().defined()) continue;
      const torch::Tensor g = q.whole.grad().reshape({q.rows, q.row_numel});
      // Rank r's rows into its part (no padded copy of the whole gradient), which is then freed: a
      // unit's reduction holds its gradients once, not twice.
      for (int64_t r = 0; r < n; ++r) {
        const int64_t from = std::min(r * q.shard_rows, q.rows), count = std::min(q.shard_rows, q.rows - from);
        if (count > 0)
          in[r].narrow(0, q.grad_offset, count * q.row_numel).copy_(g.narrow(0, from, count).reshape({-1}));
      }
      q.whole.mutable_grad() = torch::Tensor();
    }
    if (direct) params_[pack.params.front()].whole.mutable_grad() = torch::Tensor();  // `in` holds it
    torch::Tensor flat = in.view({-1});
    torch::Tensor out = flat;  // this rank's alone: the sum is its own
    if (pack.group) {
      out = torch::empty({pack.grad_numel}, in.options());
      pack.group->reduce_scatter_sum(out, flat, "reducing unit " + std::to_string(unit) + "'s gradients").wait();
      ++traffic_.reductions;
      traffic_.reduced_mb += static_cast<double>(in.nbytes()) / (1024.0 * 1024.0);
    }
    if (offloaded_) out = out.to(torch::kCPU);  // this rank's rows of the gradients, to the host shards
    for (size_t i : pack.params) {
      Param& q = params_[i];
      if (q.grad_offset < 0) continue;
      torch::Tensor part = out.narrow(0, q.grad_offset, q.shard_numel()).view(q.shard.sizes());
      torch::Tensor& grad = q.shard.mutable_grad();
      if (grad.defined()) grad.add_(part);
      else grad = part.clone();
    }
  }
  traffic_.reduce_s += seconds_since(t0);
}

void FullyShardedModel::finish_units_after(int64_t unit) {
  for (int64_t v = static_cast<int64_t>(units_.size()) - 1; v > unit; --v) {
    Unit& u = units_[static_cast<size_t>(v)];
    if (!u.backward_pending) continue;
    // Freed before the reduction, which needs the gradients only: the two are not held at once.
    // Unit 0 (the tied embedding, which the head uses too) comes here only once the whole backward is done.
    reshard(v);
    reduce_gradients(v);
    u.backward_pending = false;
    u.awaits_backward = false;
  }
}

void FullyShardedModel::finish_backward() {
  finish_units_after(-1);
  for (int64_t v = 0; v < static_cast<int64_t>(units_.size()); ++v) reshard(v);
}

void FullyShardedModel::before_forward(int64_t unit) {
  // The next micro-batch: the last one's first units are reduced first (the order every rank keeps).
  if (unit == 0 && torch::GradMode::is_enabled()) finish_units_after(-1);
  gather(unit);
  // A tied head multiplies by unit 0's embedding (on a last pipeline stage, unit 0 is that alone).
  if (head_reads_embedding() && unit == head()) gather(0);
  if (valid(unit + 1)) start_gather(unit + 1);
}

std::vector<torch::Tensor> FullyShardedModel::after_forward(int64_t unit, std::vector<torch::Tensor> outputs) {
  const bool grad = torch::GradMode::is_enabled();
  const int64_t head = this->head();
  if (!grad) {  // evaluation: nothing comes back for these weights
    if (unit == head || !(unit == 0 && head_reads_embedding())) reshard(unit);
    if (unit == head && head_reads_embedding()) reshard(0);
    return outputs;
  }
  units_[static_cast<size_t>(unit)].awaits_backward = true;
  // The head's backward usually follows at once (a pipeline's may run other micro-batches' first).
  if (unit != head && reshard_after_forward_ && !(unit == 0 && head_reads_embedding())) reshard(unit);
  // A hook on each output runs before the node that made it, so the first to fire comes before any
  // of the unit's backward (as FSDP's pre-backward hooks); before_backward's work is idempotent.
  for (auto& t : outputs)
    if (t.defined() && t.requires_grad())
      t.register_hook([this, unit](const torch::Tensor& g) {
        before_backward(unit);
        return g;
      });
  return outputs;
}

void FullyShardedModel::before_backward(int64_t unit) {
  finish_units_after(unit);
  units_[static_cast<size_t>(unit)].backward_pending = true;
  if (head_reads_embedding() && unit == head()) {
    // The tied head's backward multiplies by the embedding and adds to its gradient (reduced with unit
    // 0's, at the end); a pipeline's other micro-batches may have freed it since the head's forward.
    units_[0].backward_pending = true;
    gather(0);
  } else if (tied_) {
    reshard(0);  // past the head's backward: no backward reads the embedding's weights any more
  }
  // Unit 0's backward reads none of its weights (model/gpt.h UnitHooks): it is not gathered for it.
  if (unit != 0) gather(unit);
  if (unit - 1 > 0 && units_[static_cast<size_t>(unit - 1)].awaits_backward) start_gather(unit - 1);
}

torch::Tensor FullyShardedModel::head_token_losses(const torch::Tensor& y, const torch::Tensor& targets) {
  if (!head_parts_) return {};
  return sharded_head_token_losses(y, params_[head_parts_->param].shard, targets, head_parts_->rows, kIgnoreIndex);
}

torch::Tensor FullyShardedModel::head_logits(const torch::Tensor& y) {
  if (!head_parts_) return {};
  if (torch::GradMode::is_enabled())
    throw std::logic_error("ZeRO-3 keeps the head's weight in parts: its whole logits are computed without gradients");
  return sharded_head_logits(y, params_[head_parts_->param].shard, head_parts_->rows);
}

torch::Tensor FullyShardedModel::embedding_lookup(const torch::Tensor& tokens) {
  if (!embedding_parts_) return {};
  return sharded_embedding(tokens, params_[embedding_parts_->param].shard, embedding_parts_->rows);
}

bool FullyShardedModel::gathers_in_place(const Pack& pack) const {
  if (!pack.group || pack.params.size() != 1) return false;
  const Param& q = params_[pack.params.front()];
  return q.rows == pack.group->size() * q.shard_rows;  // no padding: the ranks' shards laid end to end are it
}

FullyShardedModel::Part FullyShardedModel::own_part(const Param& q, StateLayout layout) const {
  return part_of(q, layout, rank_in(q.group));
}

FullyShardedModel::Part FullyShardedModel::part_of(const Param& q, StateLayout layout, int64_t rank) const {
  Part p;
  if (layout == StateLayout::kBlocks) {
    // The shard starts on a block (ShardBlocks), so its blocks are the whole's.
    if (q.shard_numel() % block_ != 0)
      throw std::logic_error("ZeRO-3: block-laid state of '" + q.name + "', whose shard is not whole blocks");
    p.whole = (q.rows * q.row_numel + block_ - 1) / block_;
    p.shard = q.shard_numel() / block_;
  } else {
    p.whole = q.rows;
    p.shard = q.shard_rows;
  }
  p.first = std::min(rank * p.shard, p.whole);
  p.count = std::min(p.whole - p.first, p.shard);
  return p;
}

torch::Tensor FullyShardedModel::cut(const torch::Tensor& whole, const Part& p, const torch::Tensor& padding) {
  std::vector<int64_t> shape = whole.sizes().vec();
  shape[0] = p.shard;
  torch::Tensor shard = padding.defined() && padding.sizes().vec() == shape
                            ? padding.detach().to(whole.options().requires_grad(false), /*non_blocking=*/false,
                                                  /*copy=*/true)
                            : torch::zeros(shape, whole.options().requires_grad(false));
  if (p.count > 0) shard.narrow(0, 0, p.count).copy_(whole.narrow(0, p.first, p.count));
  return shard;
}

torch::Tensor FullyShardedModel::first_shard(const Param& q, const torch::Tensor& p, torch::Device device,
                                             const ShardFill& fill) const {
  const Part part = own_part(q, StateLayout::kRows);
  if (!p.is_meta()) return cut(p.detach(), part).to(device);
  if (!fill) throw std::logic_error("ZeRO-3: parameter '" + q.name + "' has no values and nothing fills it");
  std::vector<int64_t> shape = p.sizes().vec();
  shape[0] = part.shard;
  torch::Tensor shard = torch::empty(shape, p.options().device(device).requires_grad(false));
  fill(q.name, shard, part.first, part.count);
  return shard;
}

torch::Tensor FullyShardedModel::shard_of(const std::string& name, const torch::Tensor& whole, StateLayout layout,
                                          const torch::Tensor& padding) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end() || whole.dim() == 0 || layout == StateLayout::kWhole) return whole;
  const Part p = own_part(params_[it->second], layout);
  if (whole.size(0) == p.whole) return cut(whole, p, padding);
  // Only this rank's part (a checkpoint read so, checkpoint/training_checkpoint.h RowShare): padded.
  if (whole.size(0) != p.count) return whole;  // not of this parameter: loading names it
  return cut(whole, Part{p.count, 0, p.count, p.shard}, padding);
}

std::optional<RowPiece> FullyShardedModel::own_rows(const std::string& name, const torch::Tensor& shard,
                                                    StateLayout layout) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end() || shard.dim() == 0 || layout == StateLayout::kWhole) return std::nullopt;
  const Part p = own_part(params_[it->second], layout);
  if (shard.size(0) != p.shard) return std::nullopt;
  return RowPiece{{p.first, p.whole}, shard.detach().narrow(0, 0, p.count)};
}

RowSharding FullyShardedModel::row_sharding() {
  RowSharding r;
  std::map<Communicator*, int> index;
  for (const Param& q : params_) {
    if (q.storage) continue;
    auto [it, added] = index.emplace(q.group, static_cast<int>(r.sums.size()));
    if (added)
      r.sums.push_back([group = q.group](std::vector<torch::Tensor>& tensors) {
        if (group)  // (this rank's alone: its rows are all there is)
          for (auto& t : tensors) group->all_reduce_sum_now(t, "the optimizer's sums over row shards");
      });
    r.params[q.name] = RowShard{q.rows, own_part(q, StateLayout::kRows).count, it->second};
  }
  return r;
}

MatrixSharding FullyShardedModel::matrix_sharding() const {
  MatrixSharding m;
  std::map<Communicator*, int> index;
  for (const Param& q : params_) {
    if (q.storage || !q.group || q.whole.dim() != 2) continue;
    auto [it, added] = index.emplace(q.group, static_cast<int>(m.groups.size()));
    if (added) m.groups.push_back(matrix_group(*q.group));
    std::vector<Part> parts;  // every rank's rows of the whole
    for (int64_t r = 0; r < static_cast<int64_t>(size_of(q.group)); ++r)
      parts.push_back(part_of(q, StateLayout::kRows, r));
    m.params[q.name] =
        MatrixShards{it->second, q.whole.sizes().vec(),
                     [parts](const std::vector<torch::Tensor>& shards) {
                       std::vector<torch::Tensor> real;
                       for (size_t r = 0; r < shards.size(); ++r)
                         real.push_back(shards[r].narrow(0, 0, parts[r].count));
                       return at::cat(real);
                     },
                     [parts](const torch::Tensor& whole, int r) { return cut(whole, parts[static_cast<size_t>(r)]); }};
  }
  return m;
}

void FullyShardedModel::load_whole(const std::vector<NamedTensor>& weights) {
  torch::NoGradGuard no_grad;
  for (const auto& w : weights) {
    const auto it = by_name_.find(w.name);
    Param* q = it == by_name_.end() ? nullptr : &params_[it->second];
    if (!q || w.tensor.sizes() != q->whole.sizes()) {
      std::ostringstream why;
      why << "'" << w.name << "' (" << w.tensor.sizes() << ") is not a parameter of this model"
          << (q ? " of that shape" : "");
      throw data_error(why.str() + "\n    fix: load weights saved from this model");
    }
    q->shard.copy_(cut(w.tensor.to(q->shard.device(), q->shard.scalar_type()), own_part(*q, StateLayout::kRows)));
  }
}

void FullyShardedModel::refill(const ShardFill& fill) {
  torch::NoGradGuard no_grad;
  for (const Param& q : params_) {
    if (q.storage) continue;
    const Part part = own_part(q, StateLayout::kRows);
    torch::Tensor shard = q.shard.detach();
    fill(q.name, shard, part.first, part.count);
  }
}

torch::Tensor FullyShardedModel::keep_gather_copy(const std::string& name) {
  torch::NoGradGuard no_grad;
  Param& q = params_.at(by_name_.at(name));
  if (q.whole.scalar_type() == q.shard.scalar_type()) return {};
  if (!q.copy.defined()) q.copy = q.shard.detach().to(q.whole.scalar_type());
  for (auto* table : {&head_parts_, &embedding_parts_})  // a table's pieces are sent from it too
    if (*table && params_[(*table)->param].name == name) (*table)->rows.values = q.copy;
  return q.copy;
}

void FullyShardedModel::refresh_gather_copies() {
  torch::NoGradGuard no_grad;
  for (Param& q : params_)
    if (q.copy.defined()) q.copy.copy_(q.shard);
}

ShardBlocks zero3_shard_blocks(const OptimSettings& o) {
  const OptimizerSpec& spec = optimizer_spec(o.name);
  if (!spec.blocked) return {};
  return {spec.state_block, [o, blocked = spec.blocked](const std::string& parameter, int64_t numel) {
            return blocked(o, parameter, numel);
          }};
}

}  // namespace gputrain
