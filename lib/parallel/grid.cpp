#include "parallel/grid.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "model/architecture.h"
#include "util/error.h"

namespace gputrain {

Grid::Grid(int dp, int pp, int tp, int ep, int cp) : dp_(dp), pp_(pp), tp_(tp), ep_(ep), cp_(cp) {}

Grid::Grid(const ParallelSettings& p, int world_size)
    : pp_(static_cast<int>(p.pp)),
      tp_(static_cast<int>(p.tp)),
      ep_(static_cast<int>(p.ep)),
      cp_(static_cast<int>(p.cp)) {
  const int64_t model_parallel = p.tp * p.pp * p.cp;
  const std::string degrees = p.cp > 1 ? fmt::format("tp ({}) x pp ({}) x cp ({})", p.tp, p.pp, p.cp)
                                       : fmt::format("tp ({}) x pp ({})", p.tp, p.pp);
  if (p.dp == 0 && world_size % model_parallel != 0)
    throw config_error(
        fmt::format("parallel.{} = {} does not divide the number of processes ({}), so "
                    "parallel.dp: auto has no whole value\n    fix: start a multiple of {} processes, "
                    "or change parallel.tp / parallel.pp{}",
                    degrees, model_parallel, world_size, model_parallel, p.cp > 1 ? " / parallel.cp" : ""));
  dp_ = static_cast<int>(p.dp == 0 ? world_size / model_parallel : p.dp);
  if (static_cast<int64_t>(dp_) * model_parallel != world_size)
    throw config_error(
        fmt::format("parallel.dp ({}) x {} = {} must equal the number of processes ({})"
                    "\n    fix: set parallel.dp: auto, or start {} processes (--nproc-per-node)",
                    dp_, degrees, dp_ * model_parallel, world_size, dp_ * model_parallel));
  if (dp_ % ep_ != 0)
    throw config_error(
        fmt::format("parallel.ep ({}) must divide the data-parallel degree ({} = {} process(es) / ({})): the "
                    "experts are split over ep of the data-parallel ranks\n    fix: start a "
                    "multiple of {} processes, or use a parallel.ep that divides {}",
                    ep_, dp_, world_size, degrees, ep_ * model_parallel, dp_));
}

int smallest_world(const ParallelSettings& p) {
  return static_cast<int>((p.dp > 0 ? p.dp : p.ep) * p.tp * p.pp * p.cp);
}

GridCoord Grid::coord(int rank) const {
  GridCoord c;
  c.tp = rank % tp_;
  c.cp = (rank / tp_) % cp_;
  c.dp = (rank / (tp_ * cp_)) % dp_;
  c.pp = rank / (tp_ * cp_ * dp_);
  return c;
}

int Grid::rank_of(const GridCoord& c) const { return ((c.pp * dp_ + c.dp) * cp_ + c.cp) * tp_ + c.tp; }

std::vector<int> Grid::tp_group(int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> g;
  for (c.tp = 0; c.tp < tp_; ++c.tp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> Grid::cp_group(int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> g;
  for (c.cp = 0; c.cp < cp_; ++c.cp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> Grid::dp_group(int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> g;
  for (c.dp = 0; c.dp < dp_; ++c.dp)
    for (c.cp = 0; c.cp < cp_; ++c.cp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> Grid::pp_group(int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> g;
  for (c.pp = 0; c.pp < pp_; ++c.pp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> Grid::ep_group(int rank) const {
  GridCoord c = coord(rank);
  const int first = c.dp / ep_ * ep_;
  std::vector<int> g;
  for (c.dp = first; c.dp < first + ep_; ++c.dp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> Grid::expert_replica_group(int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> g;
  for (c.dp = c.dp % ep_; c.dp < dp_; c.dp += ep_)
    for (c.cp = 0; c.cp < cp_; ++c.cp) g.push_back(rank_of(c));
  return g;
}

std::vector<StageLayers> split_stages(const ModelSettings& m, int64_t pp) {
  const int64_t n = m.n_layer;
  if (pp < 1 || pp > n)
    throw config_error(
        fmt::format("parallel.pp ({}) must be between 1 and model.n_layer ({}): every pipeline stage "
                    "holds at least one block\n    fix: lower parallel.pp",
                    pp, n));
  const double d = static_cast<double>(m.d_model), T = static_cast<double>(m.seq_len);
  // A block's multiply-adds per token: q k v and the output projection, the MLP (three matrices for
  // SwiGLU), attention's 2 T d. GPT-2 with 4 d MLP: 12 d^2 + 2 T d.
  const double h = static_cast<double>(mlp_hidden(m)), kv = static_cast<double>(m.kv_width());
  const double mlp_matrices = static_cast<double>(architecture(m).mlp_matrices());
  const double q = static_cast<double>(m.q_width());
  const double block = d * (2 * q + 2 * kv) + mlp_matrices * d * h + 2 * T * q;
  const double head = static_cast<double>(m.padded_vocab()) * d;
  // best[k][i]: the smallest largest-stage cost splitting the first i blocks into k stages.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<size_t>(pp + 1),
                                        std::vector<double>(static_cast<size_t>(n + 1), kInf));
  std::vector<std::vector<int64_t>> cut(best.size(), std::vector<int64_t>(static_cast<size_t>(n + 1), 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= pp; ++k)
    for (int64_t i = k; i <= n; ++i)
      for (int64_t j = k - 1; j < i; ++j) {
        const double stage = static_cast<double>(i - j) * block + (k == pp && i == n ? head : 0.0);
        const double worst = std::max(best[static_cast<size_t>(k - 1)][static_cast<size_t>(j)], stage);
        if (worst < best[static_cast<size_t>(k)][static_cast<size_t>(i)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(i)] = worst;
          cut[static_cast<size_t>(k)][static_cast<size_t>(i)] = j;
        }
      }
  std::vector<StageLayers> stages(static_cast<size_t>(pp));
  int64_t end = n;
  for (int64_t k = pp; k >= 1; --k) {
    StageLayers& st = stages[static_cast<size_t>(k - 1)];
    st.first = cut[static_cast<size_t>(k)][static_cast<size_t>(end)];
    st.last = end;
    st.embeds = k == 1;
    st.has_head = k == pp;
    st.cost = (static_cast<double>(st.last - st.first) * block + (st.has_head ? head : 0.0)) / block;
    end = st.first;
  }
  return stages;
}

double bubble_fraction(int64_t pp, int64_t micro) {
  return static_cast<double>(pp - 1) / static_cast<double>(micro + pp - 1);
}

int64_t peak_micro_batches_held(PipelineSchedule schedule, int64_t pp, int64_t stage, int64_t micro) {
  return schedule == PipelineSchedule::kGpipe ? micro : std::min(pp - stage, micro);
}

}  // namespace gputrain
