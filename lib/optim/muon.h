// Muon (Keller Jordan 2024; torch.optim.Muon): each hidden matrix's momentum orthogonalized by a
// quintic Newton-Schulz iteration before it is applied; everything else (embeddings, the head, norms,
// biases) by an AdamW of its own settings (optim.muon.adamw), as every Muon recipe pairs them.
// Each matrix is the Hugging Face layout's (ParamGroup::matrix_rows: Llama's q, k and v apart though
// our attention fuses them), so one step equals torch.optim.Muon + AdamW on the transformers model.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/settings.h"
#include "optim/optimizer.h"

namespace gputrain {

struct OptimizerSpec;

// Whether Muon updates this parameter: a 2-D one that is not an embedding or the output head.
bool is_muon_matrix(const std::string& name, int64_t dims);

// torch.optim.Muon's _zeropower_via_newtonschulz of each of `updates` (2-D, all one shape), batched
// into one [n, rows, cols] iteration (in `dtype`); returns the results stacked, in `dtype`.
torch::Tensor orthogonalize(const std::vector<torch::Tensor>& updates, const MuonSettings& o, at::ScalarType dtype);

// The lr a matrix of `rows` x `cols` takes from `lr` (torch.optim.Muon's _adjust_lr).
double muon_adjusted_lr(double lr, MuonAdjustLr rule, int64_t rows, int64_t cols);

// Sharded matrices (tp, ZeRO-3) travel whole to their owners in working sets of this many elements
// of shards (16 MiB of fp32, or the largest matrix alone): what a rank holds at once stays near its
// shards plus a few sets' traffic (three are in flight: one computed, one arriving, one returning).
constexpr int64_t kMuonShardedWorkingSet = int64_t{1} << 22;

class Muon : public Optimizer {
 public:
  // `groups`' hidden matrices get Muon at lr x lr_scale and the group's weight decay; the rest an
  // AdamW (`adamw_kernel`) at optim.muon.adamw.lr and, where its group decays, its weight decay.
  Muon(std::vector<ParamGroup> groups, const OptimSettings& o, UpdateKernel adamw_kernel,
       int64_t sharded_set_elements = kMuonShardedWorkingSet);
  void step(double lr) override;
  std::string describe() const override;
  bool takes_matrix_sharding() const override { return true; }

 private:
  struct Matrix {
    torch::Tensor step, momentum;
    std::vector<int64_t> rows;  // the Hugging Face matrices' bands of its whole (empty: one matrix)
    std::string name;
  };
  // m's bands of a whole of `rows` rows; logic_error where its fused matrices do not add up to it.
  static std::vector<int64_t> bands_of(const Matrix& m, int64_t rows);
  // How the parameter `name` lies in shards over ranks, or null where it is whole here.
  const MatrixShards* shards_of(const std::string& name) const;
  // Orthogonalizes the Hugging Face matrices (bands) of `updates`, same-shaped ones in one batch (in
  // `dtype`), and hands each to `apply` with its update's index, first row and adjusted lr.
  using BandStep = std::function<void(size_t update, int64_t first_row, const torch::Tensor& orthogonal, double lr)>;
  void orthogonalize_bands(const std::vector<std::pair<const Matrix*, torch::Tensor>>& updates, double lr,
                           at::ScalarType dtype, const BandStep& apply) const;
  at::ScalarType iteration_dtype() const;
  // Matrix `index` of muon_groups_[g]: advances its momentum by `grad`, decays `param` (fp32) and
  // returns the update to orthogonalize.
  torch::Tensor momentum_update(size_t g, double lr, const torch::Tensor& param, const torch::Tensor& grad,
                                size_t index);
  // muon_groups_[g]'s step where matrices lie in shards over ranks (tp, ZeRO-3).
  void step_sharded(size_t g, double lr);

  const MuonSettings o_;
  const int64_t sharded_set_elements_;
  std::vector<ParamGroup> muon_groups_;        // each group's hidden matrices
  std::vector<std::vector<Matrix>> matrices_;  // their state, as muon_groups_
  std::unique_ptr<Optimizer> adamw_;           // the rest; null when there is none
};

const OptimizerSpec& muon_spec();  // optim.name: muon

}  // namespace gputrain
