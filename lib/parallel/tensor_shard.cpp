#include "parallel/tensor_shard.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace gputrain {
namespace {

// The parts of `t` along s.dim in the proportions of s.sections.
std::vector<torch::Tensor> sections_of(const torch::Tensor& t, const TensorShard& s) {
  const int64_t total = std::accumulate(s.sections.begin(), s.sections.end(), int64_t{0});
  const int64_t length = t.size(s.dim);
  if (total <= 0 || length % total != 0)
    throw std::logic_error("tensor shard " + s.name + ": " + std::to_string(length) +
                           " rows are not in the proportions of its sections");
  std::vector<int64_t> sizes;
  for (int64_t w : s.sections) sizes.push_back(length / total * w);
  return t.split_with_sizes(sizes, s.dim);
}

}  // namespace

torch::Tensor shard_of(const torch::Tensor& whole, const TensorShard& s, int rank, int size) {
  if (s.dim < 0) return whole;
  std::vector<torch::Tensor> parts;
  for (const auto& section : sections_of(whole, s))
    parts.push_back(section.chunk(size, s.dim)[static_cast<size_t>(rank)]);
  return parts.size() == 1 ? parts.front() : torch::cat(parts, s.dim);
}

torch::Tensor unshard(const std::vector<torch::Tensor>& shards, const TensorShard& s) {
  if (s.dim < 0) return shards.front();
  std::vector<std::vector<torch::Tensor>> per_shard;
  for (const auto& sh : shards) per_shard.push_back(sections_of(sh, s));
  std::vector<torch::Tensor> sections;
  for (size_t k = 0; k < s.sections.size(); ++k) {
    std::vector<torch::Tensor> pieces;
    for (const auto& parts : per_shard) pieces.push_back(parts[k]);
    sections.push_back(torch::cat(pieces, s.dim));
  }
  return sections.size() == 1 ? sections.front() : torch::cat(sections, s.dim);
}

RankRows rank_rows(int64_t rows, int rank, int size, int64_t row_multiple) {
  RankRows r;
  r.shard_rows = ((rows + size - 1) / size + row_multiple - 1) / row_multiple * row_multiple;
  r.first = std::min(rank * r.shard_rows, rows);
  r.count = std::min(rows - r.first, r.shard_rows);
  return r;
}

int64_t ShardBlocks::row_multiple(const std::string& parameter, int64_t rows, int64_t row_numel) const {
  if (block <= 1 || row_numel <= 0 || !applies || !applies(parameter, rows * row_numel)) return 1;
  return block / std::gcd(block, row_numel);
}

torch::Tensor join_rows(std::vector<RowPiece> pieces, std::string* problem) {
  problem->clear();
  std::sort(pieces.begin(), pieces.end(),
            [](const RowPiece& a, const RowPiece& b) { return a.slice.first < b.slice.first; });
  int64_t next = 0;
  const int64_t whole = pieces.empty() ? 0 : pieces.front().slice.whole_rows;
  std::vector<torch::Tensor> parts;
  for (const auto& p : pieces) {
    auto rows = [&](int64_t a, int64_t b) {
      return "rows " + std::to_string(a) + " to " + std::to_string(b) + " of " + std::to_string(whole);
    };
    if (p.slice.whole_rows != whole) *problem = "its pieces disagree on its number of rows";
    else if (p.slice.first > next) *problem = rows(next, p.slice.first) + " are in no file";
    else if (p.slice.first < next) *problem = rows(p.slice.first, next) + " are in two files";
    if (!problem->empty()) return {};
    parts.push_back(p.rows);
    next += p.rows.size(0);
  }
  if (next != whole) {
    *problem = "rows " + std::to_string(next) + " to " + std::to_string(whole) + " are in no file";
    return {};
  }
  return parts.size() == 1 ? parts.front() : torch::cat(parts, 0);
}

WholeIndex shard_index(const WholeIndex& whole, const TensorShard& s, int rank, int size) {
  WholeIndex out = whole;
  if (s.dim == 0) out.rows = shard_of(whole.rows.view({-1, 1}), s, rank, size).reshape({-1});
  else if (s.dim > 0) out.cols = shard_of(whole.cols.view({1, -1}), s, rank, size).reshape({-1});
  return out;
}

}  // namespace gputrain
