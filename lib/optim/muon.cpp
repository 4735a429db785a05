#include "optim/muon.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "optim/adamw.h"
#include "optim/fused_update.h"
#include "optim/matrix_owners.h"
#include "optim/optimizer_spec.h"

namespace gputrain {
namespace {

// Working sets of at least this many elements: the matrices of several blocks orthogonalized in one
// batched iteration, while the updates held at once stay bounded (128 MiB of fp32).
constexpr int64_t kMuonWorkingSet = int64_t{1} << 25;

// torch.optim.Muon's iteration on x, [rows, cols] or [n, rows, cols] with rows <= cols, op for op
// (a single matrix takes the same 2-D ops as torch's, so its results are torch's).
at::Tensor newton_schulz(at::Tensor x, const MuonSettings& o) {
  const double a = o.ns_coefficients[0], b = o.ns_coefficients[1], c = o.ns_coefficients[2];
  const bool batched = x.dim() == 3;
  const at::Tensor norm = batched ? at::linalg_vector_norm(x, 2, at::IntArrayRef{1, 2}, /*keepdim=*/true)
                                  : at::linalg_vector_norm(x, 2, at::OptionalIntArrayRef{}, false);
  x.div_(norm.clamp_min(o.eps));
  for (int64_t i = 0; i < o.ns_steps; ++i) {
    const at::Tensor gram = batched ? at::bmm(x, x.transpose(1, 2)) : at::mm(x, x.t());
    const at::Tensor poly = batched ? at::baddbmm(gram, gram, gram, b, c) : at::addmm(gram, gram, gram, b, c);
    x = batched ? at::baddbmm(x, poly, x, a, 1) : at::addmm(x, poly, x, a, 1);
  }
  return x;
}

}  // namespace

bool is_muon_matrix(const std::string& name, int64_t dims) {
  return dims == 2 && !is_embedding(name) && !name.ends_with("lm_head.weight");
}

torch::Tensor orthogonalize(const std::vector<torch::Tensor>& updates, const MuonSettings& o, at::ScalarType dtype) {
  const bool tall = updates.front().size(0) > updates.front().size(1);  // iterate on the wide side's Gram matrix
  if (updates.size() == 1) {
    at::Tensor x = updates.front().to(dtype, /*non_blocking=*/false, /*copy=*/true);  // the iteration works in place
    x = newton_schulz(tall ? x.t() : x, o);
    return (tall ? x.t() : x).unsqueeze(0);
  }
  at::Tensor x = at::stack(updates).to(dtype);
  x = newton_schulz(tall ? x.transpose(1, 2) : x, o);
  return tall ? x.transpose(1, 2) : x;
}

double muon_adjusted_lr(double lr, MuonAdjustLr rule, int64_t rows, int64_t cols) {
  const auto A = static_cast<double>(rows), B = static_cast<double>(cols);
  switch (rule) {
    case MuonAdjustLr::kOriginal:
      return lr * std::sqrt(std::max(1.0, A / B));
    case MuonAdjustLr::kMatchRmsAdamW:
      return lr * 0.2 * std::sqrt(std::max(A, B));
  }
  return lr;
}

Muon::Muon(std::vector<ParamGroup> groups, const OptimSettings& o, UpdateKernel adamw_kernel,
           int64_t sharded_set_elements)
    : Optimizer(std::move(groups)), o_(o.muon), sharded_set_elements_(sharded_set_elements) {
  std::vector<ParamGroup> rest;
  for (const ParamGroup& g : groups_) {
    ParamGroup muon = g, adamw = g;
    muon.names.clear(), muon.params.clear(), adamw.names.clear(), adamw.params.clear();
    std::vector<Matrix> matrices;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const at::Tensor& p = g.params[i];
      const std::string& n = g.names[i];
      if (!is_muon_matrix(n, p.dim())) {
        adamw.names.push_back(n);
        adamw.params.push_back(p);
        continue;
      }
      muon.names.push_back(n);
      muon.params.push_back(p);
      const auto fused = g.matrix_rows.find(n);
      matrices.push_back({add_step_counter(n), add_state(n, "momentum_buffer", at::zeros_like(p, at::kFloat)),
                          fused == g.matrix_rows.end() ? std::vector<int64_t>{} : fused->second, n});
    }
    if (!muon.params.empty()) {
      muon_groups_.push_back(std::move(muon));
      matrices_.push_back(std::move(matrices));
    }
    if (!adamw.params.empty()) {
      adamw.weight_decay = g.weight_decay > 0 ? o.muon.adamw.weight_decay : 0.0;
      adamw.lr_scale = g.lr_scale * o.muon.adamw.lr / o.lr;  // the schedule's shape at AdamW's own peak
      rest.push_back(std::move(adamw));
    }
  }
  if (!rest.empty()) {
    const AdamWOptions a{o.muon.adamw.betas[0], o.muon.adamw.betas[1], o.muon.adamw.eps};
    adamw_ = std::make_unique<AdamW>(std::move(rest), a, adamw_kernel);
    adopt_state(*adamw_);
  }
}

std::string Muon::describe() const {
  // "muon, <its AdamW's kernel> for the rest; ..." (optim bench's table reads the kernel up to the ';').
  const std::string adamw = adamw_ ? adamw_->describe() : "";
  return "muon, " +
         (adamw_ ? adamw.substr(adamw.find(", ") + 2) + " for the rest (AdamW)" : std::string("no AdamW part")) +
         "; Newton-Schulz in " + (o_.ns_dtype == MuonIterationDtype::kBf16 ? "bf16" : "fp32") +
         ", same-shaped matrices batched";
}

void Muon::step(double lr) {
  torch::NoGradGuard no_grad;
  if (adamw_) adamw_->step(lr);
  for (size_t g = 0; g < muon_groups_.size(); ++g) {
    const double group_lr = lr * muon_groups_[g].lr_scale;
    if (matrix_sharding_) {
      step_sharded(g, group_lr);
      continue;
    }
    for_each_fp32_working_set(
        muon_groups_[g],
        [&](std::vector<at::Tensor>& params, std::vector<at::Tensor>& grads, const std::vector<size_t>& indices) {
          std::vector<std::pair<const Matrix*, at::Tensor>> whole;
          for (size_t k = 0; k < indices.size(); ++k)
            whole.emplace_back(&matrices_[g][indices[k]],
                               momentum_update(g, group_lr, params[k], grads[k], indices[k]));
          orthogonalize_bands(whole, group_lr, iteration_dtype(),
                              [&](size_t i, int64_t first, const at::Tensor& o, double step) {
                                params[i].narrow(0, first, o.size(0)).add_(o, -step);
                              });
        },
        kMuonWorkingSet);
  }
}

at::ScalarType Muon::iteration_dtype() const {
  return o_.ns_dtype == MuonIterationDtype::kBf16 ? at::kBFloat16 : at::kFloat;
}

at::Tensor Muon::momentum_update(size_t g, double lr, const at::Tensor& param, const at::Tensor& grad, size_t index) {
  Matrix& m = matrices_[g][index];
  const double mu = o_.momentum, decay = muon_groups_[g].weight_decay;
  ++count(m.step);
  m.momentum.lerp_(grad, 1.0 - mu);  // an average (torch's code, not its docstring's mu B + g)
  if (decay != 0) param.mul_(1.0 - lr * decay);
  return o_.nesterov ? grad.lerp(m.momentum, mu) : m.momentum;
}

void Muon::step_sharded(size_t g, double lr) {
  // Each working set's sharded matrices travel to their owners (optim/matrix_owners.h) while the
  // previous set is orthogonalized, and come back while the next one is; its whole ones are
  // orthogonalized here meanwhile.
  const at::ScalarType dtype = iteration_dtype();
  std::vector<std::vector<size_t>> sets = fp32_working_sets(muon_groups_[g], sharded_set_elements_);
  struct InFlight {
    Fp32WorkingSet set;
    std::vector<std::pair<const Matrix*, at::Tensor>> whole;
    std::vector<size_t> whole_at, sharded_at;  // positions in the set
    std::vector<const Matrix*> sharded;
  };
  std::map<size_t, InFlight> flying;
  compute_on_owners_pipelined(
      *matrix_sharding_, sets.size(), at::kFloat,
      [&](size_t k) {
        InFlight& f = flying.emplace(k, InFlight{Fp32WorkingSet(muon_groups_[g], std::move(sets[k]))}).first->second;
        std::vector<ShardedInput> inputs;
        for (size_t j = 0; j < f.set.indices.size(); ++j) {
          const size_t index = f.set.indices[j];
          const at::Tensor update = momentum_update(g, lr, f.set.params[j], f.set.grads[j], index);
          if (const MatrixShards* shards = shards_of(muon_groups_[g].names[index])) {
            inputs.push_back({shards, update.to(dtype)});  // the iteration's first step, taken before sending
            f.sharded_at.push_back(j);
            f.sharded.push_back(&matrices_[g][index]);
          } else {
            f.whole.emplace_back(&matrices_[g][index], update);
            f.whole_at.push_back(j);
          }
        }
        return inputs;
      },
      [&](size_t k, const std::vector<size_t>& which, const std::vector<at::Tensor>& wholes) {
        // The owner orthogonalizes its whole matrices and scales each band by its lr.
        const InFlight& f = flying.at(k);
        std::vector<std::pair<const Matrix*, at::Tensor>> owned;
        std::vector<at::Tensor> results;
        for (size_t i = 0; i < wholes.size(); ++i) {
          owned.emplace_back(f.sharded[which[i]], wholes[i]);
          results.push_back(at::empty(wholes[i].sizes(), wholes[i].options().dtype(at::kFloat)));
        }
        orthogonalize_bands(owned, lr, dtype, [&](size_t i, int64_t first, const at::Tensor& o, double step) {
          at::Tensor band = results[i].narrow(0, first, o.size(0));
          at::mul_out(band, o.to(at::kFloat), -step);
        });
        return results;
      },
      [&](size_t k, std::vector<at::Tensor> steps) {
        InFlight& f = flying.at(k);
        orthogonalize_bands(f.whole, lr, dtype, [&](size_t i, int64_t first, const at::Tensor& o, double step) {
          f.set.params[f.whole_at[i]].narrow(0, first, o.size(0)).add_(o, -step);
        });
        for (size_t i = 0; i < steps.size(); ++i) f.set.params[f.sharded_at[i]].add_(steps[i]);
        f.set.finish();
        flying.erase(k);
      });
}

std::vector<int64_t> Muon::bands_of(const Matrix& m, int64_t rows) {
  if (m.rows.empty()) return {rows};
  int64_t total = 0;
  for (int64_t r : m.rows) total += r;
  if (total != rows)
    throw std::logic_error("muon: " + m.name + "'s Hugging Face matrices have " + std::to_string(total) +
                           " rows, the matrix " + std::to_string(rows));
  return m.rows;
}

const MatrixShards* Muon::shards_of(const std::string& name) const {
  if (!matrix_sharding_) return nullptr;
  const auto it = matrix_sharding_->params.find(name);
  return it == matrix_sharding_->params.end() ? nullptr : &it->second;
}

void Muon::orthogonalize_bands(const std::vector<std::pair<const Matrix*, at::Tensor>>& updates, double lr,
                               at::ScalarType dtype, const BandStep& apply) const {
  // Each matrix's bands, gathered by shape: (its index in `updates`, the band's first row, its update).
  std::map<std::pair<int64_t, int64_t>, std::vector<std::tuple<size_t, int64_t, at::Tensor>>> by_shape;
  for (size_t i = 0; i < updates.size(); ++i) {
    const at::Tensor& u = updates[i].second;
    int64_t offset = 0;
    for (int64_t rows : bands_of(*updates[i].first, u.size(0))) {
      by_shape[{rows, u.size(1)}].emplace_back(i, offset, u.narrow(0, offset, rows));
      offset += rows;
    }
  }
  for (const auto& [shape, bands] : by_shape) {
    std::vector<at::Tensor> batch;
    for (const auto& band : bands) batch.push_back(std::get<2>(band));
    const at::Tensor orthogonal = orthogonalize(batch, o_, dtype);
    const double step = muon_adjusted_lr(lr, o_.adjust_lr, shape.first, shape.second);
    for (size_t b = 0; b < bands.size(); ++b)
      apply(std::get<0>(bands[b]), std::get<1>(bands[b]), orthogonal[static_cast<int64_t>(b)], step);
  }
}

// optim.name: muon (optim/optimizer_spec.h).
const OptimizerSpec& muon_spec() {
  static const OptimizerSpec spec{
      .name = OptimName::kMuon,
      .summary =
          "Muon (torch.optim.Muon): momentum orthogonalized by Newton-Schulz for each hidden matrix (the "
          "Hugging Face layout's: q, k, v apart), AdamW (optim.muon.adamw) for embeddings, head, norms and "
          "biases; the update kernels are that AdamW's",
      .keys = {"optim.muon."},
      .fused = [](const torch::Device& device) { return fused_update_available(device); },
      .state_rule =
          [](const OptimSettings&) {
            return std::string("1 fp32 momentum = 4 bytes x hidden-matrix parameters, AdamW's 8 bytes x the rest");
          },
      .state_bytes =
          [](const OptimSettings&, const ParamShape& p) {
            return (is_muon_matrix(p.name, static_cast<int64_t>(p.sizes.size())) ? 4 : 8) * p.numel();
          },
      .make = [](std::vector<ParamGroup> groups, const OptimSettings& o, UpdateKernel kernel, const RowSharding*)
          -> std::unique_ptr<Optimizer> { return std::make_unique<Muon>(std::move(groups), o, kernel); },
      .bench_variants = {{", bf16 iteration", [](OptimSettings&) {}},
                         {", fp32 iteration", [](OptimSettings& o) { o.muon.ns_dtype = MuonIterationDtype::kFp32; }}}};
  return spec;
}

}  // namespace gputrain
