#include "parallel/tensor_parallel_4bit.h"

#include <memory>
#include <vector>

#include "model/gpt.h"
#include "model/linear.h"
#include "parallel/sharded_4bit_base.h"
#include "util/error.h"

namespace gputrain {
namespace {

// The whole's index of each of this rank's rows (dim 0) or columns (dim 1), as shard_of cuts them.
std::vector<int64_t> whole_positions(int64_t whole, const TensorShard& s, int64_t dim, int rank, int size) {
  torch::Tensor index = torch::arange(whole, torch::kLong);
  if (s.dim == dim) {
    TensorShard along = s;
    along.dim = 0;
    index = shard_of(index, along, rank, size).contiguous();
  }
  return std::vector<int64_t>(index.data_ptr<int64_t>(), index.data_ptr<int64_t>() + index.numel());
}

// One band's part held here: `values` [rows, cols] are whole blocks of the band (`own`: their indices
// among the band's `band_blocks`, in the slice's order), or cut from `stored`, the whole band as the files
// keep it in 4 bits. Its absmax decoded in float32 (see the header).
Quantized4bit slice_piece(const QuantizeSettings& q, const std::string& name, const torch::Tensor& values,
                          const torch::Tensor& own, int64_t band_blocks, const std::optional<Quantized4bit>& stored,
                          Communicator& tp) {
  Quantized4bit p;
  if (stored) {
    p.type = stored->type, p.block_size = stored->block_size, p.dtype = stored->dtype;
    p.codes = stored->codes.reshape({band_blocks, p.block_size / 2}).index_select(0, own).reshape({-1, 1});
    p.absmax = block_absmax(*stored).index_select(0, own);
  } else {
    p = quantize_4bit(values.reshape(-1), quant4_type(q.base), q.block_size, /*double_quant=*/false);
    if (q.double_quant) {
      Quantized4bit whole;
      whole.block_size = q.block_size;
      whole.shape = {band_blocks * q.block_size};
      nest_agreed_absmax(whole, p.absmax, own, &tp, name);
      p.absmax = block_absmax(whole).index_select(0, own);
    }
  }
  p.nested = false;
  p.shape = values.sizes().vec();
  return p;
}

}  // namespace

int64_t quantize_sliced_base(GptImpl& model, const std::function<bool(const std::string&)>& holds,
                             const WeightRows& rows, const WholeStoredBands& stored,
                             const std::function<TensorShard(const std::string&)>& split_of, Communicator& tp,
                             torch::Device device) {
  torch::NoGradGuard no_grad;
  const QuantizeSettings& q = model.cfg.quantize;
  const int64_t block = q.block_size;
  int64_t bytes = 0;
  for_each_base_linear(model, [&](const std::string& name, LinearImpl& linear) {
    if (!holds(name)) return;
    const TensorShard s = split_of(name);
    const int64_t rows_here = linear.weight.size(0), cols_here = linear.weight.size(1);
    const int64_t out = s.dim == 0 ? rows_here * tp.size() : rows_here;
    const int64_t in = s.dim == 1 ? cols_here * tp.size() : cols_here;
    const std::vector<int64_t> row_of = whole_positions(out, s, 0, tp.rank(), tp.size());
    const int64_t first_col = whole_positions(in, s, 1, tp.rank(), tp.size()).front();
    if (in % block != 0 || cols_here % block != 0)
      throw config_error("parallel.tp (" + std::to_string(tp.size()) + ") cuts " + name + "'s rows of " +
                         std::to_string(in) + " into " + std::to_string(cols_here) +
                         " columns, not whole blocks of model.quantize.block_size (" + std::to_string(block) +
                         ")\n    fix: use a parallel.tp or block size whose slices are whole blocks");
    auto w = std::make_shared<QuantizedWeight>();
    w->out_features = rows_here;
    w->in_features = cols_here;
    int64_t band_first = 0, here = 0;
    for (int64_t band : hf_row_bands(model.cfg, name, {out, in})) {
      // This rank's rows of the band: a run of its slice (shard_of keeps the whole's order).
      std::vector<int64_t> own;
      int64_t count = 0;
      for (; here + count < rows_here && row_of[here + count] < band_first + band; ++count)
        for (int64_t c = first_col; c < first_col + cols_here; c += block)
          own.push_back(((row_of[here + count] - band_first) * in + c) / block);
      if (count == 0) throw std::logic_error("quantize_sliced_base: no rows of a band of " + name + " on this rank");
      const std::optional<Quantized4bit> held = stored ? stored(name, band_first, band) : std::nullopt;
      torch::Tensor values = torch::empty({count, cols_here}, linear.weight.options().device(torch::kCPU));
      if (!held) rows(name, values, here, count);
      Quantized4bit p = slice_piece(q, name, values, torch::tensor(own, torch::kLong), band * in / block, held, tp);
      p.codes = p.codes.to(device);
      p.absmax = p.absmax.to(device);
      bytes += p.storage_bytes();
      w->pieces.push_back(std::move(p));
      band_first += band;
      here += count;
    }
    linear.set_quantized(std::move(w));
  });
  return bytes;
}

}  // namespace gputrain
