#include "parallel/tensor_shard.h"

namespace gputrain {

torch::Tensor shard_of(const torch::Tensor& whole, const TensorShard& s, int rank, int size) {
  if (s.dim < 0) return whole;
  std::vector<torch::Tensor> parts;
  for (const auto& section : whole.chunk(s.sections, s.dim))
    parts.push_back(section.chunk(size, s.dim)[static_cast<size_t>(rank)]);
  return parts.size() == 1 ? parts.front() : torch::cat(parts, s.dim);
}

torch::Tensor unshard(const std::vector<torch::Tensor>& shards, const TensorShard& s) {
  if (s.dim < 0) return shards.front();
  std::vector<torch::Tensor> sections;
  for (int64_t k = 0; k < s.sections; ++k) {
    std::vector<torch::Tensor> pieces;
    for (const auto& sh : shards) pieces.push_back(sh.chunk(s.sections, s.dim)[static_cast<size_t>(k)]);
    sections.push_back(torch::cat(pieces, s.dim));
  }
  return sections.size() == 1 ? sections.front() : torch::cat(sections, s.dim);
}

}  // namespace gputrain
