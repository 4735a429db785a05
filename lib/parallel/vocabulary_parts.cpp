#include "parallel/vocabulary_parts.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace gputrain {
namespace {

// A piece of rank j's rows: rows [first, first + count) of the whole, at `offset` in rank j's shard.
struct Piece {
  int j = 0;
  int64_t first = 0, count = 0, offset = 0;
};

constexpr int64_t kPieceBytes = 32 << 20, kMinPieceRows = 128, kPiecesPerRank = 4;

// Every rank's real rows in pieces, rank by rank: every rank lists the same (they depend on the
// table alone, not on a rank's tokens).
std::vector<Piece> pieces_of(const VocabularyRows& rows, int64_t width) {
  const int64_t by_bytes = std::max<int64_t>(1, kPieceBytes / std::max<int64_t>(width * 4, 1));
  const int64_t by_share = std::max(kMinPieceRows, (rows.shard_rows + kPiecesPerRank - 1) / kPiecesPerRank);
  const int64_t per_piece = rows.piece_rows > 0 ? rows.piece_rows : std::min(by_bytes, by_share);
  std::vector<Piece> pieces;
  for (int j = 0; j < rows.group->size(); ++j) {
    const int64_t first = std::min(j * rows.shard_rows, rows.rows);
    const int64_t count = std::min(rows.shard_rows, rows.rows - first);
    for (int64_t from = 0; from < count; from += per_piece)
      pieces.push_back({j, first + from, std::min(per_piece, count - from), from});
  }
  return pieces;
}

// The pieces' rows on the compute device in `dtype`, one after another (sent in the rows' dtype): the
// next piece's broadcast is in flight while the current one is used, so at most two pieces are held.
class PieceStream {
 public:
  PieceStream(const torch::Tensor& shard, const VocabularyRows& rows, torch::ScalarType dtype)
      : shard_(rows.values.defined() ? rows.values : shard.detach()),
        rows_(rows),
        dtype_(dtype),
        pieces_(pieces_of(rows, shard.size(1))) {}

  const std::vector<Piece>& pieces() const { return pieces_; }

  // Piece pieces()[i]'s rows [count, d_model]; call with i = 0, 1, ... in order.
  torch::Tensor rows(size_t i) {
    Pending current = i == 0 ? start(0) : std::move(next_);
    if (i + 1 < pieces_.size()) next_ = start(i + 1);
    current.broadcast.wait();
    return current.rows.to(dtype_);  // sent in the gather dtype, used in the product's
  }

 private:
  struct Pending {
    torch::Tensor rows;
    PendingCollective broadcast;
  };
  Pending start(size_t i) {
    const Piece& p = pieces_[i];
    Pending out;
    out.rows = p.j == rows_.group->rank()
                   ? shard_.narrow(0, p.offset, p.count)
                         .to(rows_.compute, rows_.dtype, /*non_blocking=*/false, /*copy=*/true)
                         .contiguous()
                   : torch::empty({p.count, shard_.size(1)}, shard_.options().device(rows_.compute).dtype(rows_.dtype));
    out.broadcast =
        rows_.group->broadcast(out.rows, p.j, "broadcasting rank " + std::to_string(p.j) + "'s vocabulary rows");
    if (rows_.traffic) {
      ++rows_.traffic->gathers;
      rows_.traffic->gathered_mb += static_cast<double>(out.rows.nbytes()) / (1024.0 * 1024.0);
    }
    return out;
  }

  torch::Tensor shard_;
  VocabularyRows rows_;
  torch::ScalarType dtype_;
  std::vector<Piece> pieces_;
  Pending next_;
};

// Each piece's gradient summed onto the rank that owns it, one in flight at a time; this rank's rows
// are added straight into the shard's .grad (no second shard-sized buffer: a tied table gets the
// embedding's and the head's gradients in one place).
class PieceReducer {
 public:
  PieceReducer(const torch::Tensor& shard, const VocabularyRows& rows) : shard_(shard), rows_(rows) {}

  void add(const Piece& p, const torch::Tensor& grad) {
    finish();
    sending_ = grad.to(shard_.scalar_type()).contiguous();
    piece_ = p;
    pending_ =
        rows_.group->reduce_sum(sending_, p.j, "summing vocabulary rows' gradient onto rank " + std::to_string(p.j));
    if (rows_.traffic) {
      ++rows_.traffic->reductions;
      rows_.traffic->reduced_mb += static_cast<double>(sending_.nbytes()) / (1024.0 * 1024.0);
    }
  }
  void finish() {
    pending_.wait();
    if (sending_.defined() && piece_.j == rows_.group->rank()) {
      torch::Tensor& grad = shard_.mutable_grad();
      if (!grad.defined()) grad = torch::zeros_like(shard_, torch::MemoryFormat::Contiguous);
      grad.narrow(0, piece_.offset, piece_.count).add_(sending_.to(grad.device()));
    }
    sending_ = torch::Tensor();
  }

 private:
  torch::Tensor shard_;
  VocabularyRows rows_;
  torch::Tensor sending_;
  Piece piece_;
  PendingCollective pending_;
};

// The dtype the head's products are computed in: autocast's where it is on (as the whole head's
// linear layer would), else the rows'.
torch::ScalarType product_dtype(const VocabularyRows& rows) {
  const auto device = rows.compute.type();
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device) : rows.dtype;
}

// Where `ids` fall in piece p: their positions in it (clamped) and whether they do.
std::pair<torch::Tensor, torch::Tensor> in_piece(const torch::Tensor& ids, const Piece& p) {
  const torch::Tensor local = ids - p.first;
  return {local.clamp(0, p.count - 1), local.ge(0) & local.lt(p.count)};
}

struct ShardedHeadLoss : torch::autograd::Function<ShardedHeadLoss> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y,
                               const torch::Tensor& shard, const torch::Tensor& targets, const VocabularyRows* rows,
                               int64_t ignore_index) {
    const torch::ScalarType dtype = product_dtype(*rows);
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // dtypes chosen here
    const torch::Tensor yc = y.detach().to(dtype);
    const torch::Tensor valid = targets.ne(ignore_index);
    const auto f32 = y.options().dtype(torch::kFloat);
    const int64_t n = y.size(0);
    // The log-sum-exp merged piece by piece: the running maximum and the sum of exp(logit - maximum).
    torch::Tensor max = torch::full({n}, -std::numeric_limits<float>::infinity(), f32);
    torch::Tensor sum = torch::zeros({n}, f32), target_logit = torch::zeros({n}, f32);
    PieceStream stream(shard, *rows, dtype);
    for (size_t i = 0; i < stream.pieces().size(); ++i) {
      const torch::Tensor logits = at::matmul(yc, stream.rows(i).t()).to(torch::kFloat);
      const torch::Tensor new_max = at::maximum(max, std::get<0>(logits.max(1)));
      sum = sum * (max - new_max).exp() + (logits - new_max.unsqueeze(1)).exp().sum(1);
      max = new_max;
      auto [column, inside] = in_piece(targets, stream.pieces()[i]);
      target_logit = at::where(valid & inside, logits.gather(1, column.unsqueeze(1)).squeeze(1), target_logit);
    }
    const torch::Tensor lse = max + sum.log();
    ctx->save_for_backward({yc, shard, targets, lse});
    ctx->saved_data["rows"] = reinterpret_cast<int64_t>(rows);
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    ctx->saved_data["y_dtype"] = static_cast<int64_t>(y.scalar_type());
    return at::where(valid, lse - target_logit, 0.0);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &yc = saved[0], &shard = saved[1], &targets = saved[2], &lse = saved[3];
    const auto* rows = reinterpret_cast<const VocabularyRows*>(ctx->saved_data["rows"].toInt());
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto y_dtype = static_cast<torch::ScalarType>(ctx->saved_data["y_dtype"].toInt());
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const torch::Tensor valid = targets.ne(ctx->saved_data["ignore_index"].toInt());
    // d loss / d logit = softmax - one-hot(target) on rows with a target, times that row's loss's gradient.
    const torch::Tensor scale = valid.to(torch::kFloat) * grads[0].to(torch::kFloat);
    const bool weight_grad = ctx->needs_input_grad(1);
    torch::Tensor grad_y = torch::zeros(yc.sizes(), yc.options().dtype(torch::kFloat));
    std::optional<PieceReducer> reducer;
    if (weight_grad) reducer.emplace(shard, *rows);
    PieceStream stream(shard, *rows, dtype);
    for (size_t i = 0; i < stream.pieces().size(); ++i) {
      const Piece& p = stream.pieces()[i];
      const torch::Tensor w = stream.rows(i);
      torch::Tensor d = (at::matmul(yc, w.t()).to(torch::kFloat) - lse.unsqueeze(1)).exp_();
      auto [column, inside] = in_piece(targets, p);
      d.scatter_add_(1, column.unsqueeze(1), -(valid & inside).to(torch::kFloat).unsqueeze(1));
      d.mul_(scale.unsqueeze(1));
      const torch::Tensor dc = d.to(dtype);
      // Summed over the pieces in fp32 and rounded to `dtype` once at the end, as the whole head's
      // product over the vocabulary would be (a rounding per piece drifts from it under fp16).
      grad_y.add_(dtype == torch::kFloat ? at::matmul(dc, w) : at::matmul(dc.to(torch::kFloat), w.to(torch::kFloat)));
      if (reducer) reducer->add(p, at::matmul(dc.t(), yc));
    }
    if (reducer) reducer->finish();
    return {grad_y.to(dtype).to(y_dtype), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct ShardedEmbedding : torch::autograd::Function<ShardedEmbedding> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& tokens,
                               const torch::Tensor& shard, const VocabularyRows* rows) {
    const torch::Tensor ids = tokens.reshape({-1});
    torch::Tensor out =
        torch::zeros({ids.size(0), shard.size(1)}, shard.options().device(rows->compute).dtype(rows->dtype));
    PieceStream stream(shard, *rows, rows->dtype);
    for (size_t i = 0; i < stream.pieces().size(); ++i) {
      const torch::Tensor w = stream.rows(i);
      // Masks rather than the tokens' indices (nonzero): no wait for the device to count them.
      auto [local, inside] = in_piece(ids, stream.pieces()[i]);
      out = at::where(inside.unsqueeze(1), w.index_select(0, local), out);
    }
    ctx->save_for_backward({ids, shard});
    ctx->saved_data["rows"] = reinterpret_cast<int64_t>(rows);
    std::vector<int64_t> shape = tokens.sizes().vec();
    shape.push_back(shard.size(1));
    return out.view(shape);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &ids = saved[0], &shard = saved[1];
    if (!ctx->needs_input_grad(1)) return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
    const auto* rows = reinterpret_cast<const VocabularyRows*>(ctx->saved_data["rows"].toInt());
    // A lookup's gradient needs no weights: each piece sums the rows of its tokens.
    const torch::Tensor g = grads[0].reshape({ids.size(0), shard.size(1)}).to(shard.scalar_type());
    PieceReducer reducer(shard, *rows);
    for (const Piece& p : pieces_of(*rows, shard.size(1))) {
      auto [local, inside] = in_piece(ids, p);
      torch::Tensor part = torch::zeros({p.count, shard.size(1)}, g.options());
      part.index_add_(0, local, at::where(inside.unsqueeze(1), g, 0.0));
      reducer.add(p, part);
    }
    reducer.finish();
    return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sharded_head_token_losses(const torch::Tensor& y, const torch::Tensor& shard,
                                        const torch::Tensor& targets, const VocabularyRows& rows,
                                        int64_t ignore_index) {
  return ShardedHeadLoss::apply(y, shard, targets, &rows, ignore_index);
}

torch::Tensor sharded_head_loss_sum(const torch::Tensor& y, const torch::Tensor& shard, const torch::Tensor& targets,
                                    const VocabularyRows& rows, int64_t ignore_index) {
  return sharded_head_token_losses(y, shard, targets, rows, ignore_index).sum();
}

torch::Tensor sharded_head_logits(const torch::Tensor& y, const torch::Tensor& shard, const VocabularyRows& rows) {
  torch::NoGradGuard no_grad;
  const torch::ScalarType dtype = product_dtype(rows);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const torch::Tensor yc = y.detach().to(dtype);
  torch::Tensor logits = torch::empty({y.size(0), rows.rows}, yc.options());
  PieceStream stream(shard, rows, dtype);
  for (size_t i = 0; i < stream.pieces().size(); ++i) {
    const Piece& p = stream.pieces()[i];
    logits.narrow(1, p.first, p.count).copy_(at::matmul(yc, stream.rows(i).t()));
  }
  return logits;
}

torch::Tensor sharded_embedding(const torch::Tensor& tokens, const torch::Tensor& shard, const VocabularyRows& rows) {
  return ShardedEmbedding::apply(tokens, shard, &rows);
}

}  // namespace gputrain
