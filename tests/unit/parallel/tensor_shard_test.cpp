// ZeRO-3 checkpoint pieces (parallel/tensor_shard.h join_rows): rows from every rank's file join
// into the whole tensor in any order; a gap or an overlap is named, never joined.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include "parallel/tensor_shard.h"

using namespace gputrain;
using Catch::Matchers::Contains;

TEST_CASE("tensor shards: row pieces join into the whole tensor, and gaps or overlaps are named", "[parallel]") {
  const at::Tensor whole = at::arange(10 * 3, at::kFloat).reshape({10, 3});
  // Three ranks of ceil(10/3) = 4 rows: 4, 4 and 2, given out of order.
  std::vector<RowPiece> pieces = {
      {{8, 10}, whole.narrow(0, 8, 2)}, {{0, 10}, whole.narrow(0, 0, 4)}, {{4, 10}, whole.narrow(0, 4, 4)}};
  std::string problem;
  CHECK(at::equal(join_rows(pieces, &problem), whole));
  CHECK(problem.empty());

  auto gap = pieces;
  gap.erase(gap.begin() + 2);
  CHECK_FALSE(join_rows(gap, &problem).defined());
  CHECK_THAT(problem, Contains("rows 4 to 8 of 10 are in no file"));
  auto missing_end = pieces;
  missing_end.erase(missing_end.begin());
  CHECK_FALSE(join_rows(missing_end, &problem).defined());
  CHECK_THAT(problem, Contains("rows 8 to 10 are in no file"));
  auto overlap = pieces;
  overlap.push_back({{2, 10}, whole.narrow(0, 2, 2)});
  CHECK_FALSE(join_rows(overlap, &problem).defined());
  CHECK_THAT(problem, Contains("rows 2 to 4 of 10 are in two files"));
}
