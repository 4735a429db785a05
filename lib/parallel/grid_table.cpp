#include "parallel/grid_table.h"

#include <fmt/format.h>

#include "model/architecture.h"
#include "model/gpt_shapes.h"
#include "parallel/rank_layout.h"

namespace gputrain {

std::string grid_table(const Settings& s, const Grid& g) {
  const std::vector<ParamShape> shapes = gpt_parameter_shapes(s.model);
  auto layout_at = [&](int cp) {  // rank 0's and its cp peers' (what differs between cp places: the chunks)
    return rank_layout(shapes, s.model, s.parallel, g, g.rank_of({0, 0, 0, cp}));
  };
  const RankLayout first = layout_at(0);
  const int64_t H = s.model.n_head, F = mlp_hidden(s.model);
  const bool cp = g.cp() > 1;
  std::string out =
      cp ? fmt::format(
               "parallel grid: dp {} x pp {} x cp {} x tp {} = {} processes (rank = ((pp x {} + dp) x {} + cp) x {} + "
               "tp: tensor- and context-parallel peers are adjacent ranks, keep them on one node)\n\n",
               g.dp(), g.pp(), g.cp(), g.tp(), g.size(), g.dp(), g.cp(), g.tp())
         : fmt::format(
               "parallel grid: dp {} x pp {} x tp {} = {} processes (rank = (pp x {} + dp) x {} + tp: tensor-parallel "
               "peers are adjacent ranks, keep them on one node)\n\n",
               g.dp(), g.pp(), g.tp(), g.size(), g.dp(), g.tp());
  out += cp ? "| stage (pp) | cp place | tp shard | ranks (one per dp replica) | layers | holds "
              "|\n|---|---|---|---|---|---|\n"
            : "| stage (pp) | tp shard | ranks (one per dp replica) | layers | holds |\n|---|---|---|---|---|\n";
  const std::vector<StageLayers>& stages = first.stages;
  for (int pp = 0; pp < g.pp(); ++pp) {
    const StageLayers& st = stages[static_cast<size_t>(pp)];
    std::string layers = fmt::format("blocks {}-{}", st.first, st.last - 1);
    if (st.embeds) layers = "embeddings, " + layers;
    if (st.has_head) layers += ", ln_f, head + loss";
    for (int c = 0; c < g.cp(); ++c)
      for (int tp = 0; tp < g.tp(); ++tp) {
        std::vector<int> ranks;
        for (int dp = 0; dp < g.dp(); ++dp) ranks.push_back(g.rank_of({dp, pp, tp, c}));
        const int64_t h = H / g.tp(), f = F / g.tp();
        const std::string holds = g.tp() == 1 ? std::string("whole layers")
                                              : fmt::format("heads {}-{} of {}, MLP columns {}-{} of {}", tp * h,
                                                            (tp + 1) * h - 1, H, tp * f, (tp + 1) * f - 1, F);
        out += fmt::format("| {} |{} {} | {} | {} | {} |\n", pp, cp ? fmt::format(" {} |", c) : "", tp,
                           fmt::join(ranks, ", "), layers, holds);
      }
  }
  if (cp) {
    // Each place's chunks, as the layout gives them.
    std::string places;
    for (int place = 0; place < g.cp(); ++place) {
      const SequenceChunks c = layout_at(place).chunks;
      places += fmt::format("{}place {}: chunks {} and {} (tokens {}-{} and {}-{})", place ? "; " : "", place, c.first,
                            c.second, c.first * c.length, (c.first + 1) * c.length - 1, c.second * c.length,
                            (c.second + 1) * c.length - 1);
    }
    out += fmt::format(
        "\ncontext parallel: cp {} cuts each {}-token sequence into {} chunks of {}; {}; attention gathers the "
        "others' keys and values. cp groups (one per dp replica, stage and tp shard):",
        g.cp(), s.model.seq_len, first.chunks.count, first.chunks.length, places);
    for (int r = 0; r < g.size(); ++r)
      if (g.coord(r).cp == 0) out += fmt::format(" [{}]", fmt::join(g.cp_group(r), ", "));
    out += "\n";
  }
  if (g.ep() > 1) {
    const int64_t local = first.local_experts;
    out += fmt::format(
        "\nexpert parallel: ep {} splits each mixture layer's {} experts over runs of {} consecutive dp ranks: "
        "the rank at place j of a run holds experts {}j to {}j+{}; each expert has {} holder(s), whose "
        "gradients are summed\n",
        g.ep(), s.model.moe.experts, g.ep(), local, local, local - 1, first.expert_replicas);
  }
  if (g.pp() > 1) {
    out += "\nstage compute (block units, the last stage includes the output head): ";
    for (size_t i = 0; i < stages.size(); ++i) out += fmt::format("{}{:.2f}", i ? ", " : "", stages[i].cost);
    out += "\n";
  }
  return out;
}

}  // namespace gputrain
