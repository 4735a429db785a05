// The dp x pp x tp grid's rank layout and groups, the degrees' checks, the
// split of the layer stack into stages, and the schedules' arithmetic.
#include <catch2/catch.hpp>

#include <set>

#include "parallel/grid.h"
#include "test_util.h"
#include "util/error.h"

using namespace gputrain;
using Catch::Matchers::Contains;

namespace {

std::string grid_error(int64_t dp, int64_t tp, int64_t pp, int world) {
  ParallelSettings p;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  return test::error_message(ErrorKind::kConfig, [&] { Grid g(p, world); });
}

}  // namespace

TEST_CASE("grid: tensor-parallel peers are adjacent ranks, then replicas, then stages", "[parallel]") {
  const Grid g(2, 2, 2);  // dp, pp, tp
  std::set<int> seen;
  for (int r = 0; r < 8; ++r) {
    const GridCoord c = g.coord(r);
    CHECK(g.rank_of(c) == r);
    seen.insert(c.dp * 4 + c.pp * 2 + c.tp);
  }
  CHECK(seen.size() == 8);
  CHECK(g.coord(5).tp == 1);
  CHECK(g.coord(5).dp == 0);
  CHECK(g.coord(5).pp == 1);
  CHECK(g.tp_group(5) == std::vector<int>{4, 5});
  CHECK(g.dp_group(5) == std::vector<int>{5, 7});
  CHECK(g.pp_group(5) == std::vector<int>{1, 5});
  // Every rank is in exactly one group of each kind, of the right size.
  for (int r = 0; r < 8; ++r) {
    CHECK(g.tp_group(r).size() == 2);
    for (int peer : g.dp_group(r)) CHECK(g.dp_group(peer) == g.dp_group(r));
  }
}

TEST_CASE("grid: the degrees must multiply to the world, with dp auto filling it", "[parallel]") {
  ParallelSettings p;
  p.tp = 2;
  p.pp = 2;
  CHECK(Grid(p, 8).dp() == 2);
  CHECK(Grid(p, 4).dp() == 1);
  CHECK_THAT(grid_error(0, 4, 1, 6),
             Contains("parallel.tp (4) x pp (1) = 4 does not divide the number of processes (6)"));
  CHECK_THAT(grid_error(3, 2, 1, 8),
             Contains("parallel.dp (3) x tp (2) x pp (1) = 6 must equal the number of processes (8)"));
  CHECK(grid_error(2, 2, 2, 8).empty());
}

TEST_CASE("grid: expert parallelism splits each dp group into runs of ep consecutive dp ranks", "[parallel]") {
  const Grid g(4, 1, 2, 2);  // dp 4, pp 1, tp 2, ep 2: dp ranks {0, 1} and {2, 3} each split the experts
  // Rank 3 is tp 1, dp 1; its dp group is ranks 1, 3, 5, 7.
  CHECK(g.dp_group(3) == std::vector<int>{1, 3, 5, 7});
  CHECK(g.ep_group(3) == std::vector<int>{1, 3});
  CHECK(g.ep_group(5) == std::vector<int>{5, 7});
  CHECK(g.expert_replica_group(3) == std::vector<int>{3, 7});  // the second place of each run
  CHECK(g.expert_replica_group(0) == std::vector<int>{0, 4});
  for (int r = 0; r < 8; ++r) {
    for (int peer : g.ep_group(r)) CHECK(g.ep_group(peer) == g.ep_group(r));
    for (int peer : g.expert_replica_group(r)) CHECK(g.expert_replica_group(peer) == g.expert_replica_group(r));
  }
  ParallelSettings p;
  p.ep = 4;
  CHECK(Grid(p, 8).ep() == 4);
  p.ep = 3;
  try {
    Grid bad(p, 4);
    FAIL("ep 3 over dp 4 was accepted");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Contains("parallel.ep (3) must divide the data-parallel degree (4"));
  }
}

TEST_CASE("grid: stages are contiguous, non-empty and balanced with the output head on the last", "[parallel]") {
  const ModelSettings gpt2 = test::model_settings(50304, 1024, 12, 12, 768);
  for (int64_t pp : {1, 2, 3, 4, 6, 12}) {
    INFO("pp " << pp);
    const auto st = split_stages(gpt2, pp);
    REQUIRE(st.size() == static_cast<size_t>(pp));
    CHECK(st.front().first == 0);
    CHECK(st.back().last == 12);
    CHECK(st.front().embeds);
    CHECK(st.back().has_head);
    double worst = 0;
    for (size_t i = 0; i < st.size(); ++i) {
      CHECK(st[i].last > st[i].first);
      if (i > 0) CHECK(st[i].first == st[i - 1].last);
      worst = std::max(worst, st[i].cost);
    }
    if (pp == 4) {
      // The head (50304 x 768) costs about 4.5 blocks: the last stage gets fewer blocks than the
      // first, and the largest stage costs less than with 3 blocks each (3 + 4.5 = 7.5 block units).
      CHECK(st.back().last - st.back().first < st.front().last - st.front().first);
      CHECK(worst < 7.5);
    }
  }
  CHECK_THROWS_WITH(split_stages(gpt2, 13), Contains("parallel.pp (13) must be between 1 and model.n_layer (12)"));
}

TEST_CASE("grid: bubble fraction and the micro-batches a stage holds under each schedule", "[parallel]") {
  CHECK(bubble_fraction(4, 8) == Approx(3.0 / 11.0));
  CHECK(bubble_fraction(1, 8) == 0.0);
  CHECK(peak_micro_batches_held(PipelineSchedule::kOneFOneB, 4, 0, 8) == 4);
  CHECK(peak_micro_batches_held(PipelineSchedule::kOneFOneB, 4, 3, 8) == 1);
  CHECK(peak_micro_batches_held(PipelineSchedule::kOneFOneB, 4, 0, 2) == 2);
  CHECK(peak_micro_batches_held(PipelineSchedule::kGpipe, 4, 3, 8) == 8);
}

TEST_CASE("grid: context-parallel peers sit next to tensor-parallel ones, and replicas span dp and cp", "[parallel]") {
  const Grid g(2, 2, 2, 1, 2);  // dp, pp, tp, ep, cp: rank = ((pp x 2 + dp) x 2 + cp) x 2 + tp
  CHECK(g.size() == 16);
  CHECK(g.replicas() == 4);
  std::set<int> seen;
  for (int r = 0; r < 16; ++r) {
    const GridCoord c = g.coord(r);
    CHECK(g.rank_of(c) == r);
    seen.insert(((c.pp * 2 + c.dp) * 2 + c.cp) * 2 + c.tp);
  }
  CHECK(seen.size() == 16);
  const GridCoord c = g.coord(7);  // pp 0, dp 1, cp 1, tp 1
  CHECK((c.pp == 0 && c.dp == 1 && c.cp == 1 && c.tp == 1));
  CHECK(g.tp_group(7) == std::vector<int>{6, 7});
  CHECK(g.cp_group(7) == std::vector<int>{5, 7});
  CHECK(g.dp_group(7) == std::vector<int>{1, 3, 5, 7});  // (dp, cp) order: the ZeRO shards' order
  CHECK(g.pp_group(7) == std::vector<int>{7, 15});
  // The degrees checked against the world name cp too.
  ParallelSettings p;
  p.cp = 2;
  p.tp = 2;
  CHECK(Grid(p, 8).dp() == 2);
  p.dp = 3;
  CHECK_THAT(test::error_message(ErrorKind::kConfig, [&] { Grid bad(p, 8); }),
             Contains("parallel.dp (3) x tp (2) x pp (1) x cp (2) = 12 must equal the number of processes (8)"));
}

TEST_CASE("grid: expert parallelism runs over the dp ranks of one cp place, expert holders over every cp place",
          "[parallel]") {
  const Grid g(4, 1, 1, 2, 2);                                       // dp 4, ep 2, cp 2: rank = dp x 2 + cp
  CHECK(g.ep_group(0) == std::vector<int>{0, 2});                    // dp 0 and 1 at cp 0
  CHECK(g.ep_group(3) == std::vector<int>{1, 3});                    // dp 0 and 1 at cp 1
  CHECK(g.expert_replica_group(0) == std::vector<int>{0, 1, 4, 5});  // dp 0 and 2, both cp places
}
