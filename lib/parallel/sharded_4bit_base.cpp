#include "parallel/sharded_4bit_base.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "model/gpt.h"
#include "model/gpt_shapes.h"
#include "model/linear.h"
#include "parallel/tensor_shard.h"

namespace gputrain {
namespace {

// A band's 4-bit tensor with its nested statistics, and this rank's rows of its codes and absmax.
struct BandShards {
  Quantized4bit piece;
  torch::Tensor codes, absmax;
};

// This rank's blocks of a tensor of `blocks` (rank_rows: the same shard length on every rank of `group`).
RankRows own_blocks(int64_t blocks, const Communicator* group) {
  return rank_rows(blocks, group ? group->rank() : 0, group ? group->size() : 1);
}

// Rows [first, first + count) of `t` in a tensor of `shard_rows` rows, zeros after them.
torch::Tensor padded_rows(const torch::Tensor& t, int64_t first, int64_t count, int64_t shard_rows) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] = shard_rows;
  torch::Tensor out = torch::zeros(shape, t.options());
  if (count > 0) out.narrow(0, 0, count).copy_(t.narrow(0, first, count));
  return out;
}

// The codes of blocks `own` (two codes a byte; the last block may end in the middle of a byte's pair).
torch::Tensor own_codes(const torch::Tensor& codes, const RankRows& own, int64_t block_size) {
  const int64_t half = block_size / 2, first = std::min(own.first * half, codes.size(0));
  return padded_rows(codes, first, std::min(codes.size(0) - first, own.count * half), own.shard_rows * half);
}

// Rows [first_row, first_row + band) of weight `name` quantized by this rank's blocks alone.
BandShards quantize_own_blocks(const QuantizeSettings& q, const std::string& name, int64_t first_row, int64_t band,
                               int64_t in, torch::ScalarType dtype, const WeightRows& rows, Communicator* group) {
  const int64_t numel = band * in, block = q.block_size;
  const RankRows own = own_blocks((numel + block - 1) / block, group);
  BandShards out;
  Quantized4bit& piece = out.piece;
  piece.type = quant4_type(q.base), piece.block_size = block, piece.shape = {band, in}, piece.dtype = dtype;
  torch::Tensor absmax = torch::zeros({own.count}, torch::kFloat);  // of this rank's blocks
  out.codes = torch::zeros({own.shard_rows * block / 2, 1}, torch::kUInt8);
  if (own.count > 0) {
    // Only the rows its blocks cover are read. They start on a block, so quantized alone they give the
    // whole tensor's codes and absmax.
    const int64_t e0 = own.first * block, e1 = std::min(numel, (own.first + own.count) * block);
    const int64_t r0 = e0 / in, r1 = (e1 + in - 1) / in;
    torch::Tensor part = torch::empty({r1 - r0, in}, dtype);
    rows(name, part, first_row + r0, r1 - r0);
    const Quantized4bit mine =
        quantize_4bit(part.view({-1}).slice(0, e0 - r0 * in, e1 - r0 * in), piece.type, block, /*double_quant=*/false);
    out.codes.narrow(0, 0, mine.codes.size(0)).copy_(mine.codes);
    absmax = mine.absmax;
  }
  if (!q.double_quant) {  // each block's absmax is its own: nothing to agree
    out.absmax = padded_rows(absmax, 0, own.count, own.shard_rows);
    return out;
  }
  nest_agreed_absmax(piece, absmax, torch::arange(own.first, own.first + own.count, torch::kLong), group, name);
  out.absmax = padded_rows(piece.absmax, own.first, own.count, own.shard_rows);
  return out;
}

// A band the files keep in 4 bits, cut as stored.
BandShards cut_stored(Quantized4bit stored, const Communicator* group) {
  const RankRows own = own_blocks(stored.blocks(), group);
  BandShards out;
  out.codes = own_codes(stored.codes.reshape({-1, 1}), own, stored.block_size);
  out.absmax = padded_rows(stored.absmax, own.first, own.count, own.shard_rows);
  out.piece = std::move(stored);
  return out;
}

}  // namespace

void nest_agreed_absmax(Quantized4bit& q, const torch::Tensor& mine, const torch::Tensor& own, Communicator* group,
                        const std::string& name) {
  torch::Tensor absmax = torch::zeros({q.blocks()}, torch::kFloat);
  absmax.index_copy_(0, own, mine);
  // The offset is the mean of every block's absmax: the others' blocks are zeros here, summed exactly.
  if (group) group->all_reduce_sum_now(absmax, "the 4-bit statistics of " + name);
  nest_absmax(q, absmax);
}

Sharded4bitBase quantize_sharded_base(GptImpl& model, const std::function<bool(const std::string&)>& holds,
                                      const WeightRows& rows, const StoredBands& stored, const ShardGroupOf& group_of,
                                      torch::Device compute, torch::Device shards) {
  torch::NoGradGuard no_grad;
  Sharded4bitBase out;
  for_each_base_linear(model, [&](const std::string& name, LinearImpl& linear) {
    if (!holds(name)) return;
    Communicator* group = group_of(name);
    const int64_t unit = unit_of_parameter(name, model.cfg.n_layer);
    auto w = std::make_shared<QuantizedWeight>();
    w->out_features = linear.weight.size(0);
    w->in_features = linear.weight.size(1);
    int64_t first = 0;
    for (int64_t band : hf_row_bands(model.cfg, name, linear.weight.sizes())) {
      std::optional<Quantized4bit> held = stored ? stored(name, first, band) : std::nullopt;
      BandShards b = held ? cut_stored(std::move(*held), group)
                          : quantize_own_blocks(model.cfg.quantize, name, first, band, w->in_features,
                                                linear.weight.scalar_type(), rows, group);
      Quantized4bit& p = b.piece;
      p.shape = {band, w->in_features};
      int64_t nested_bytes = p.nested ? 4 : 0;  // the offset, and the nested absmax and map
      for (torch::Tensor* t : {&p.nested_absmax, &p.nested_code})
        if (t->defined()) {
          *t = t->to(compute);
          nested_bytes += static_cast<int64_t>(t->nbytes());
        }
      // The whole codes and absmax, without memory: their unit's gathers fill them.
      const auto meta = torch::TensorOptions().device(torch::kMeta);
      p.codes = torch::empty({(p.numel() + 1) / 2, 1}, meta.dtype(torch::kUInt8));
      p.absmax = torch::empty({p.blocks()}, meta.dtype(p.nested ? torch::kUInt8 : torch::kFloat));
      const std::string piece = name + " rows " + std::to_string(first) + " to " + std::to_string(first + band);
      out.storage.push_back({piece + " (4-bit codes)", unit, group, p.codes, b.codes.to(shards)});
      out.storage.push_back({piece + " (4-bit absmax)", unit, group, p.absmax, b.absmax.to(shards)});
      out.bytes += static_cast<int64_t>(b.codes.nbytes() + b.absmax.nbytes()) + nested_bytes;
      w->pieces.push_back(std::move(p));
      first += band;
    }
    linear.set_quantized(std::move(w));
  });
  return out;
}

}  // namespace gputrain
