#include "optim/adafactor.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace gputrain {

Adafactor::Adafactor(std::vector<ParamGroup> groups, AdafactorSettings opts)
    : Optimizer(std::move(groups)), opts_(opts) {
  for (const auto& g : groups_) {
    std::vector<Slot> slots;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const at::Tensor& p = g.params[i];
      const std::string& n = g.names[i];
      const auto f32 = p.options().dtype(at::kFloat);
      Slot s;
      s.factored = p.dim() >= 2;
      s.step = add_step_counter(n);
      if (s.factored) {
        std::vector<int64_t> row(p.sizes().begin(), p.sizes().end() - 1);  // mean over the last dim
        std::vector<int64_t> col(p.sizes().begin(), p.sizes().end());      // mean over the second-last
        col.erase(col.end() - 2);
        s.row = add_state(n, "exp_avg_sq_row", at::zeros(row, f32));
        // A matrix's column statistics are over all its rows (each ZeRO-3 rank holds them whole).
        s.col =
            add_state(n, "exp_avg_sq_col", at::zeros(col, f32), p.dim() > 2 ? StateLayout::kRows : StateLayout::kWhole);
      } else {
        s.exp_avg_sq = add_state(n, "exp_avg_sq", at::zeros(p.sizes(), f32));
      }
      if (opts_.beta1 > 0) s.exp_avg = add_state(n, "exp_avg", at::zeros(p.sizes(), f32));
      slots.push_back(std::move(s));
    }
    slots_.push_back(std::move(slots));
  }
}

std::string Adafactor::describe() const {
  return std::string("adafactor, ") + describe_kernel(UpdateKernel::kForeach, groups_) +
         "; factored statistics batched by shape" + (opts_.beta1 > 0 ? ", momentum" : "") +
         (opts_.relative_step ? ", relative step" : "") + (opts_.scale_parameter ? ", parameter scale" : "");
}

namespace {

// Tensors whose statistics are computed together: matrices of one shape (stacked along a new
// first dimension) or vectors (multi-tensor ops), all at the same step count, so that one
// beta2t serves them all. `members` are positions in the working set.
struct Batch {
  bool factored = false;
  int64_t step = 0;
  std::vector<int64_t> shape;  // factored only
  std::vector<size_t> members;
  int group = 0;  // ZeRO-3: the members' RowShard::group (their sums span one group of ranks)
};

// A batch of matrices stacks its gradients, so it holds as many elements as the working set's
// largest tensor, and at least this many: the stacked copies and temporaries stay within what
// updating that tensor alone takes, while a model's layers, which share a few shapes, make a few
// batches. (On a GPU each op is a launch; on the CPU, too, GPT-2's step takes half the time of
// per-tensor ops, docs/benchmarks.md.)
constexpr int64_t kMinBatchElements = int64_t{1} << 20;

// `tensors` (one shape) stacked along a new first dimension; one tensor is viewed, not copied.
at::Tensor stacked(const std::vector<at::Tensor>& tensors) {
  return tensors.size() == 1 ? tensors.front().unsqueeze(0) : at::stack(tensors);
}

// Writes a stack updated in place back into the tensors it was made from (a view of one
// tensor already wrote through).
void unstack_into(std::vector<at::Tensor>& tensors, const at::Tensor& stack) {
  if (tensors.size() > 1) at::_foreach_copy_(tensors, stack.unbind(0));
}

std::vector<c10::Scalar> scalars(const std::vector<double>& values) { return {values.begin(), values.end()}; }

// Norms of ZeRO-3 row shards made whole: squares summed over the ranks sharing each (padding rows
// are zeros), one sum per group of ranks. `shard`: each norm's tensor's.
void sum_norms(std::vector<at::Tensor>& norms, const std::vector<RowShard>& shard, const RowSharding& sharding) {
  for (int group = 0; group < static_cast<int>(sharding.sums.size()); ++group) {
    std::vector<size_t> of;
    for (size_t k = 0; k < norms.size(); ++k)
      if (shard[k].group == group) of.push_back(k);
    if (of.empty()) continue;  // (every rank of the group holds the same parameters, so has none either)
    std::vector<at::Tensor> squares;
    for (size_t k : of) squares.push_back(norms[k]);
    squares = {at::stack(squares).square_()};
    sharding.sums[static_cast<size_t>(group)](squares);
    const std::vector<at::Tensor> summed = squares.front().sqrt_().unbind(0);
    for (size_t j = 0; j < of.size(); ++j) norms[of[j]] = summed[j];
  }
}

// ZeRO-3 row shards of a batch of matrices: which rows are real (1) or padding (0), [B, rows],
// and each whole matrix's rows, [B, 1]. Means over rows are sums over the ranks' real rows / whole.
struct ShardedRows {
  at::Tensor real, whole;
  const std::function<void(std::vector<at::Tensor>&)>* sum = nullptr;
  at::Tensor mean(const at::Tensor& t, int64_t rows_dim) const {  // t: [B, rows, ...] or [B, ..., rows]
    std::vector<at::Tensor> total{(t * (rows_dim == -1 ? real : real.unsqueeze(-1))).sum(rows_dim, true)};
    (*sum)(total);
    return total.front() / (rows_dim == -1 ? whole : whole.unsqueeze(-1));
  }
};

// The ShardedRows of a batch of matrix shards of `rows` rows, `of` each member's.
ShardedRows sharded_rows(const std::vector<RowShard>& of, int64_t rows, const at::TensorOptions& options,
                         const RowSharding& sharding) {
  std::vector<at::Tensor> real;
  std::vector<double> whole;
  for (const RowShard& s : of) {
    real.push_back((at::arange(rows, options) < static_cast<double>(s.real_rows)).to(at::kFloat));
    whole.push_back(static_cast<double>(s.whole_rows));
  }
  return {at::stack(real), at::tensor(whole, options).view({-1, 1}),
          &sharding.sums[static_cast<size_t>(of.front().group)]};
}

// Factored second moment of same-shape matrices: row and column means of grad^2 + eps (over
// the last two dimensions) decay into `rows` and `cols` (updated in place); returns each
// unclipped update, grad / sqrt(row x col / mean(row)). `sharded`: the matrices are ZeRO-3 row
// shards (padding rows have zero gradients, hence zero updates).
std::vector<at::Tensor> factored_updates(const std::vector<at::Tensor>& grads, std::vector<at::Tensor> rows,
                                         std::vector<at::Tensor> cols, double beta2t, double eps,
                                         const ShardedRows* sharded) {
  const at::Tensor grad = stacked(grads);
  at::Tensor sq = (grad * grad).add_(eps);
  at::Tensor row = stacked(rows), col = stacked(cols);
  row.mul_(beta2t).add_(sq.mean(-1), 1.0 - beta2t);
  col.mul_(beta2t).add_(sharded ? sharded->mean(sq, -2).squeeze(-2) : sq.mean(-2), 1.0 - beta2t);
  sq.reset();
  unstack_into(rows, row);
  unstack_into(cols, col);
  const at::Tensor row_mean = sharded ? sharded->mean(row, -1) : row.mean(-1, /*keepdim=*/true);
  const at::Tensor r = (row / row_mean).rsqrt_().unsqueeze(-1);
  const at::Tensor c = col.unsqueeze(-2).rsqrt();
  return (r * c).mul_(grad).unbind(0);
}

// Full second moment of vectors: grad^2 + eps decays into `sq_avgs` (in place); returns each
// unclipped update, grad / sqrt(sq_avg).
std::vector<at::Tensor> full_updates(const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& sq_avgs,
                                     double beta2t, double eps) {
  std::vector<at::Tensor> sq = at::_foreach_mul(grads, grads);
  at::_foreach_add_(sq, eps);
  at::_foreach_mul_(sq_avgs, beta2t);
  at::_foreach_add_(sq_avgs, sq, 1.0 - beta2t);
  std::vector<at::Tensor> updates = at::_foreach_rsqrt(sq_avgs);
  at::_foreach_mul_(updates, grads);
  return updates;
}

}  // namespace

void Adafactor::step(double lr) {
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    const double group_lr = lr * g.lr_scale;
    for_each_fp32_working_set(g, [&](std::vector<at::Tensor>& params, std::vector<at::Tensor>& grads,
                                     const std::vector<size_t>& idx) {
      const size_t n = idx.size();
      const RowSharding* sharding = row_sharding_ ? &*row_sharding_ : nullptr;
      // Under ZeRO-3: each tensor's whole rows and how many of its shard's are real.
      std::vector<RowShard> shard(n);
      if (sharding)
        for (size_t k = 0; k < n; ++k) shard[k] = sharding->params.at(g.names[idx[k]]);
      int64_t budget = kMinBatchElements;
      for (const at::Tensor& p : params) budget = std::max(budget, p.numel());
      // Step counts, base learning rates, and the batches; the unclipped update of each tensor
      // is then computed batch by batch (one set of ops per batch instead of per tensor).
      std::vector<double> base_lr(n), rms_divisor(n), clip_divisor(n);
      std::vector<Batch> batches;
      for (size_t k = 0; k < n; ++k) {
        Slot& s = slots_[gi][idx[k]];
        const int64_t t = ++count(s.step);
        base_lr[k] = opts_.relative_step ? std::min(1e-2, 1.0 / std::sqrt(static_cast<double>(t))) : group_lr;
        const double numel = sharding ? static_cast<double>(params[k].numel() / params[k].size(0) * shard[k].whole_rows)
                                      : static_cast<double>(params[k].numel());
        rms_divisor[k] = std::sqrt(numel);
        clip_divisor[k] = rms_divisor[k] * opts_.clip_threshold;
        const std::vector<int64_t> shape = s.factored ? params[k].sizes().vec() : std::vector<int64_t>{};
        auto same = std::find_if(batches.rbegin(), batches.rend(), [&](const Batch& b) {
          return b.factored == s.factored && b.step == t && b.shape == shape && b.group == shard[k].group;
        });
        // A factored batch has one shape, so its size is members x this tensor's.
        if (same == batches.rend() ||
            (s.factored && static_cast<int64_t>(same->members.size() + 1) * params[k].numel() > budget)) {
          batches.push_back(Batch{s.factored, t, shape, {}, shard[k].group});
          same = batches.rbegin();
        }
        same->members.push_back(k);
      }
      std::vector<at::Tensor> updates(n);
      for (const Batch& b : batches) {
        const double beta2t = 1.0 - std::pow(static_cast<double>(b.step), opts_.decay_rate);
        std::vector<at::Tensor> gs, rows, cols, sq_avgs;
        for (size_t k : b.members) {
          const Slot& s = slots_[gi][idx[k]];
          gs.push_back(grads[k]);
          if (b.factored) rows.push_back(s.row), cols.push_back(s.col);
          else sq_avgs.push_back(s.exp_avg_sq);
        }
        // A ZeRO-3 shard of a matrix holds some of its rows: column statistics and the mean of
        // the row statistics take every rank's. (Higher dimensions shard a leading one: local.)
        std::optional<ShardedRows> sharded;
        if (sharding && b.factored && b.shape.size() == 2) {
          std::vector<RowShard> of;
          for (size_t k : b.members) of.push_back(shard[k]);
          sharded = sharded_rows(of, b.shape[0], gs.front().options(), *sharding);
        }
        const std::vector<at::Tensor> batch_updates =
            b.factored ? factored_updates(gs, rows, cols, beta2t, opts_.eps[0], sharded ? &*sharded : nullptr)
                       : full_updates(gs, sq_avgs, beta2t, opts_.eps[0]);
        for (size_t j = 0; j < b.members.size(); ++j) updates[b.members[j]] = batch_updates[j];
      }
      // Each update clipped to RMS <= clip_threshold and scaled by its lr: one factor per
      // tensor, lr / max(1, RMS(update) / clip_threshold), kept on the device (no sync).
      // scale_parameter multiplies the lr by max(eps[1], RMS(parameter)).
      std::vector<at::Tensor> factor = at::_foreach_norm(updates);
      if (sharding) sum_norms(factor, shard, *sharding);
      at::_foreach_div_(factor, scalars(clip_divisor));
      at::_foreach_clamp_min_(factor, 1.0);
      at::_foreach_reciprocal_(factor);
      std::vector<at::Tensor> step_lr;  // per tensor under scale_parameter, else base_lr
      if (opts_.scale_parameter) {
        step_lr = at::_foreach_norm(params);
        if (sharding) sum_norms(step_lr, shard, *sharding);
        at::_foreach_div_(step_lr, scalars(rms_divisor));
        at::_foreach_clamp_min_(step_lr, opts_.eps[1]);
        at::_foreach_mul_(step_lr, scalars(base_lr));
        at::_foreach_mul_(factor, step_lr);
      } else {
        at::_foreach_mul_(factor, scalars(base_lr));
      }
      at::_foreach_mul_(updates, factor);
      if (opts_.beta1 > 0) {
        std::vector<at::Tensor> m;
        for (size_t k : idx) m.push_back(slots_[gi][k].exp_avg);
        at::_foreach_mul_(m, opts_.beta1);
        at::_foreach_add_(m, updates, 1.0 - opts_.beta1);
        updates = m;
      }
      if (g.weight_decay != 0) {
        // Decoupled: p *= 1 - wd * lr_t, with lr_t per tensor.
        if (opts_.scale_parameter) {
          std::vector<at::Tensor> decay = at::_foreach_mul(step_lr, -g.weight_decay);
          at::_foreach_add_(decay, 1.0);
          at::_foreach_mul_(params, decay);
        } else {
          std::vector<double> decay(n);
          for (size_t k = 0; k < n; ++k) decay[k] = 1.0 - g.weight_decay * base_lr[k];
          at::_foreach_mul_(params, scalars(decay));
        }
      }
      at::_foreach_sub_(params, updates);
    });
  }
}

// optim.name: adafactor (optim/optimizer_spec.h).
const OptimizerSpec& adafactor_spec() {
  static const OptimizerSpec spec{
      .name = OptimName::kAdafactor,
      .summary = "transformers' Adafactor: factored second moment",
      .keys = {"optim.adafactor."},
      .state_rule =
          [](const OptimSettings& o) {
            return std::string("4 bytes x (rows + cols) per matrix, 4 x size per vector") +
                   (o.adafactor.beta1 > 0 ? ", + 4 bytes x parameters of momentum" : "");
          },
      .state_bytes =
          [](const OptimSettings& o, const ParamShape& p) {
            const int64_t n = p.numel();
            int64_t bytes = 4 * n;  // a vector's second moment
            if (p.sizes.size() >= 2) bytes = 4 * (n / p.sizes.back() + n / p.sizes[p.sizes.size() - 2]);
            return bytes + (o.adafactor.beta1 > 0 ? 4 * n : 0);
          },
      .make = [](std::vector<ParamGroup> groups, const OptimSettings& o, UpdateKernel, const RowSharding*)
          -> std::unique_ptr<Optimizer> { return std::make_unique<Adafactor>(std::move(groups), o.adafactor); },
      .check =
          [](const OptimSettings& o, const std::function<bool(const std::string&)>& changed) {
            std::vector<OptimizerProblem> problems;
            if (o.adafactor.relative_step && changed("optim.lr"))
              problems.push_back({"optim.lr", "is ignored: optim.adafactor.relative_step sets the step size",
                                  "remove optim.lr, or set optim.adafactor.relative_step: false"});
            return problems;
          },
      .bench_variants = {{", beta1 0 (no momentum)", [](OptimSettings& o) { o.adafactor.beta1 = 0; }},
                         {", beta1 0.9", [](OptimSettings& o) { o.adafactor.beta1 = 0.9; }}}};
  return spec;
}

}  // namespace gputrain
