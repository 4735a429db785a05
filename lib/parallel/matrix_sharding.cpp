#include "parallel/matrix_sharding.h"

#include <ATen/ATen.h>

#include <map>

#include "parallel/fully_sharded.h"
#include "parallel/tensor_shard.h"

namespace gputrain {

MatrixGroup matrix_group(Communicator& c) {
  MatrixGroup g;
  g.rank = c.rank();
  g.size = c.size();
  g.start_exchange = [&c](const std::vector<torch::Tensor>& sends,
                          const std::vector<int64_t>& receive) -> MatrixGroup::Arrival {
    const torch::Device here = sends.front().device();
    std::vector<int64_t> sent;
    std::vector<torch::Tensor> flat;
    for (const auto& t : sends) {
      sent.push_back(t.numel());
      flat.push_back(t.reshape(-1));
    }
    torch::Tensor in = at::cat(flat).to(c.tensor_device());
    int64_t total = 0;
    for (int64_t n : receive) total += n;
    torch::Tensor out = at::empty({total}, in.options());
    auto pending = std::make_shared<PendingCollective>(
        c.all_to_all(out, in, receive, sent, "the optimizer's exchange of matrix shards (optim/matrix_owners.h)"));
    // The buffers stay held until the wait: the backend reads and writes them meanwhile.
    return [pending, in, out, receive, here]() {
      pending->wait();
      const torch::Tensor arrived = out.to(here);
      std::vector<torch::Tensor> pieces;
      int64_t offset = 0;
      for (int64_t n : receive) {
        pieces.push_back(arrived.narrow(0, offset, n));
        offset += n;
      }
      return pieces;
    };
  };
  return g;
}

std::optional<MatrixSharding> matrix_sharding(const RankShare& share, const ProcessGroups& groups) {
  if (share.fully_sharded) return share.fully_sharded->matrix_sharding();
  Communicator* tp = groups.tp();
  if (!tp || share.tensor_split.empty()) return std::nullopt;
  std::map<std::string, torch::Tensor> held;
  for (const auto& w : share.weights) held[w.name] = w.tensor;
  MatrixSharding out;
  out.groups.push_back(matrix_group(*tp));
  const int size = tp->size();
  for (const TensorShard& s : share.tensor_split) {
    const auto it = held.find(s.name);
    if (s.dim < 0 || it == held.end() || it->second.dim() != 2) continue;
    std::vector<int64_t> whole = it->second.sizes().vec();
    whole[static_cast<size_t>(s.dim)] *= size;
    out.params[s.name] =
        MatrixShards{0, whole, [s](const std::vector<torch::Tensor>& shards) { return unshard(shards, s); },
                     [s, size](const torch::Tensor& w, int rank) { return shard_of(w, s, rank, size).contiguous(); }};
  }
  return out;
}

}  // namespace gputrain
