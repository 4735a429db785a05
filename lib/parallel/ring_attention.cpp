#include "parallel/ring_attention.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "parallel/group_handle.h"
#include "util/error.h"

namespace gputrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The tags of the ring's three kinds of message (Gloo matches a receive by peer and tag).
constexpr int kKeysTag = 0, kBackwardKeysTag = 1, kGradientsTag = 2;

// One block handed to the next rank of the ring while the previous rank's arrives, through the
// communicator's device. Under NCCL a pair's messages share a stream: even places send first and
// odd ones receive first, so that no two neighbours both wait on a send.
class RingPass {
 public:
  RingPass(Communicator& cp, const torch::Tensor& block, int tag, const std::string& what) : home_(block.device()) {
    sent_ = block.to(cp.tensor_device()).contiguous();
    received_ = torch::empty_like(sent_);
    const int n = cp.size(), me = cp.rank();
    if (me % 2 == 0) send_ = cp.send(sent_, (me + 1) % n, tag, what);
    receive_ = cp.recv(received_, (me + n - 1) % n, tag, what);
    if (me % 2 == 1) send_ = cp.send(sent_, (me + 1) % n, tag, what);
  }
  torch::Tensor finish() {
    receive_.wait();
    send_.wait();
    return received_.to(home_);
  }

 private:
  torch::Device home_;
  torch::Tensor sent_, received_;
  PendingCollective send_, receive_;
};

// Each key or value head repeated for the query heads that read it (grouped-query attention), and
// the inverse for gradients: each group's heads summed.
torch::Tensor per_query_head(const torch::Tensor& t, int64_t heads) {
  const int64_t group = heads / t.size(1);
  return group > 1 ? t.repeat_interleave(group, 1) : t;
}
torch::Tensor per_kv_head(const torch::Tensor& g, int64_t kv_heads) {
  const int64_t group = g.size(1) / kv_heads;
  if (group == 1) return g;
  return g.view({g.size(0), kv_heads, group, g.size(2), g.size(3)}).sum(2);
}

// -inf (a row that sees nothing) as 0, so that exp(x - it) stays 0 rather than NaN.
torch::Tensor finite(const torch::Tensor& lse) { return lse.masked_fill(lse.isinf(), 0.0); }

// [B, H, rows, Tl] float32 scores of query rows against a block's keys; -inf where not visible.
torch::Tensor block_scores(const torch::Tensor& q_rows, const torch::Tensor& keys, const torch::Tensor& visible_rows) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q_rows.size(-1)));
  return at::matmul(q_rows, keys.transpose(-2, -1))
      .mul_(scale)
      .masked_fill_(visible_rows.logical_not(), -std::numeric_limits<float>::infinity());
}

// A block's float32 output and log-sum-exp ([B, H, Tl, D], [B, H, Tl]; -inf where a row sees none of it).
struct BlockResult {
  torch::Tensor out, lse;
};

// How one block's attention and its gradients are computed (RingKernel). q, the block's keys and
// values kv [2, B, Hkv, Tl, D] and the output y are in the compute dtype; gradients in float32.
struct BlockAttention {
  RingKernel kernel;
  int64_t tile_rows;

  BlockResult forward(const torch::Tensor& q, const torch::Tensor& kv, const torch::Tensor& visible) const {
    return kernel == RingKernel::kFused ? fused(q, kv, visible) : tiled(q, kv, visible);
  }
  // Adds the queries' gradients into dq; returns the block's keys' and values' [2, B, Hkv, Tl, D]. The
  // weights are recomputed from the whole window's log-sum-exp, so each block's share is exact.
  torch::Tensor backward(const torch::Tensor& q, const torch::Tensor& kv, const torch::Tensor& visible,
                         const torch::Tensor& dout, const torch::Tensor& y, const torch::Tensor& lse,
                         torch::Tensor& dq) const {
    return kernel == RingKernel::kFused ? fused_gradients(q, kv, visible, dout, y, lse, dq)
                                        : tiled_gradients(q, kv, visible, dout, y, lse, dq);
  }

 private:
  // ATen's CPU flash kernel, which returns the log-sum-exp (a row that sees nothing gets 0 from it).
  static torch::Tensor additive(const torch::Tensor& visible, const torch::Tensor& like) {
    return torch::zeros(visible.sizes(), like.options())
        .masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
  }
  static BlockResult fused(const torch::Tensor& q, const torch::Tensor& kv, const torch::Tensor& visible) {
    const int64_t H = q.size(1);
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(
        q, per_query_head(kv[0], H), per_query_head(kv[1], H), 0.0, false, additive(visible, q));
    return {out.to(torch::kFloat),
            lse.masked_fill(visible.any(-1).logical_not(), -std::numeric_limits<float>::infinity())};
  }
  static torch::Tensor fused_gradients(const torch::Tensor& q, const torch::Tensor& kv, const torch::Tensor& visible,
                                       const torch::Tensor& dout, const torch::Tensor& y, const torch::Tensor& lse,
                                       torch::Tensor& dq) {
    const int64_t H = q.size(1), Hkv = kv.size(2);
    auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        dout.to(q.scalar_type()), q, per_query_head(kv[0], H), per_query_head(kv[1], H), y, lse, 0.0, false,
        additive(visible, q));
    dq.add_(gq);
    return torch::stack({per_kv_head(gk, Hkv), per_kv_head(gv, Hkv)}).to(torch::kFloat);
  }

  // Float32 matmuls over tiles of query rows (any device): the transient scores are [B, H, tile_rows, Tl].
  BlockResult tiled(const torch::Tensor& q, const torch::Tensor& kv, const torch::Tensor& visible) const {
    const int64_t H = q.size(1), Tl = q.size(2);
    const torch::Tensor q32 = q.to(torch::kFloat);
    const torch::Tensor keys = per_query_head(kv[0].to(torch::kFloat), H);
    const torch::Tensor values = per_query_head(kv[1].to(torch::kFloat), H);
    BlockResult r{torch::empty_like(q32), torch::empty({q.size(0), H, Tl}, q32.options())};
    for (int64_t r0 = 0; r0 < Tl; r0 += tile_rows) {
      const int64_t rows = std::min(tile_rows, Tl - r0);
      const torch::Tensor scores = block_scores(q32.narrow(2, r0, rows), keys, visible.narrow(2, r0, rows));
      const torch::Tensor lse = scores.logsumexp(-1);
      r.lse.narrow(2, r0, rows).copy_(lse);
      r.out.narrow(2, r0, rows).copy_(at::matmul((scores - finite(lse).unsqueeze(-1)).exp_(), values));
    }
    return r;
  }
  torch::Tensor tiled_gradients(const torch::Tensor& q, const torch::Tensor& kv, const torch::Tensor& visible,
                                const torch::Tensor& dout, const torch::Tensor& y, const torch::Tensor& lse,
                                torch::Tensor& dq) const {
    const int64_t H = q.size(1), Tl = q.size(2), Hkv = kv.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const torch::Tensor q32 = q.to(torch::kFloat);
    const torch::Tensor delta = (dout * y.to(torch::kFloat)).sum(-1);  // each row's sum of weight x its gradient
    const torch::Tensor keys = per_query_head(kv[0].to(torch::kFloat), H);
    const torch::Tensor values = per_query_head(kv[1].to(torch::kFloat), H);
    torch::Tensor dk = torch::zeros_like(keys), dv = torch::zeros_like(values);
    for (int64_t r0 = 0; r0 < Tl; r0 += tile_rows) {
      const int64_t rows = std::min(tile_rows, Tl - r0);
      const torch::Tensor q_rows = q32.narrow(2, r0, rows), dout_rows = dout.narrow(2, r0, rows);
      const torch::Tensor weights =
          (block_scores(q_rows, keys, visible.narrow(2, r0, rows)) - finite(lse.narrow(2, r0, rows)).unsqueeze(-1))
              .exp_();
      dv.add_(at::matmul(weights.transpose(-2, -1), dout_rows));
      const torch::Tensor dscores =
          weights.mul_(at::matmul(dout_rows, values.transpose(-2, -1)).sub_(delta.narrow(2, r0, rows).unsqueeze(-1)))
              .mul_(scale);
      dq.narrow(2, r0, rows).add_(at::matmul(dscores, keys));
      dk.add_(at::matmul(dscores.transpose(-2, -1), q_rows));
    }
    return torch::stack({per_kv_head(dk, Hkv), per_kv_head(dv, Hkv)});
  }
};

// Merges a block's attention into the running output and log-sum-exp (the exact softmax over both).
void merge(torch::Tensor& out, torch::Tensor& lse, const BlockResult& block) {
  const torch::Tensor merged = at::logaddexp(lse, block.lse), base = finite(merged);
  out.mul_((lse - base).exp_().unsqueeze(-1)).add_(block.out * (block.lse - base).exp_().unsqueeze(-1));
  lse = merged;
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t group, const torch::Tensor& places,
                               const torch::Tensor& documents, int64_t window, int64_t kernel, int64_t tile_rows) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // the merges stay float32
    Communicator& cp = group_from_handle(group);
    const ContextLayout layout{places, documents, window};
    const BlockAttention block{static_cast<RingKernel>(kernel), tile_rows};
    const int n = cp.size(), me = cp.rank();
    torch::Tensor out = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
    torch::Tensor lse =
        torch::full({q.size(0), q.size(1), q.size(2)}, -std::numeric_limits<float>::infinity(), out.options());
    torch::Tensor kv = torch::stack({k, v}).detach();
    for (int s = 0; s < n; ++s) {
      std::optional<RingPass> next;
      if (s + 1 < n) next.emplace(cp, kv, kKeysTag, "context-parallel ring keys and values");
      const torch::Tensor visible = layout.visible(me, (me + n - s) % n);
      if (visible.any().item<bool>()) merge(out, lse, block.forward(q, kv, visible));  // else hidden: skipped
      if (next) kv = next->finish();
    }
    // The output is kept as returned (in q's dtype, as flash attention keeps it).
    const torch::Tensor y = out.to(q.scalar_type());
    ctx->save_for_backward({q, k, v, y, lse, places, documents});
    ctx->saved_data["group"] = group;
    ctx->saved_data["window"] = window;
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["tile_rows"] = tile_rows;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list g) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &y = saved[3], &lse = saved[4];
    const ContextLayout layout{saved[5], saved[6], ctx->saved_data["window"].toInt()};
    const BlockAttention block{static_cast<RingKernel>(ctx->saved_data["kernel"].toInt()),
                               ctx->saved_data["tile_rows"].toInt()};
    Communicator& cp = group_from_handle(ctx->saved_data["group"].toInt());
    const int n = cp.size(), me = cp.rank();
    const torch::Tensor dout = g[0].to(torch::kFloat);
    torch::Tensor dq = torch::zeros(q.sizes(), dout.options());
    torch::Tensor kv = torch::stack({k, v});
    std::optional<RingPass> sums;  // the block at hand's key and value gradients from the ranks before
    for (int s = 0; s < n; ++s) {
      std::optional<RingPass> next;
      if (s + 1 < n) next.emplace(cp, kv, kBackwardKeysTag, "context-parallel ring keys and values (backward)");
      const torch::Tensor visible = layout.visible(me, (me + n - s) % n);
      torch::Tensor mine = visible.any().item<bool>()
                               ? block.backward(q, kv, visible, dout, y, lse, dq)
                               : torch::zeros({2, k.size(0), k.size(1), k.size(2), k.size(3)}, dout.options());
      if (sums) mine.add_(sums->finish());
      sums.emplace(cp, mine, kGradientsTag, "context-parallel ring key and value gradients");
      if (next) kv = next->finish();
    }
    const torch::Tensor dkv = sums->finish();  // after n passes, this rank's own block's
    return {dq.to(q.scalar_type()),
            dkv[0].to(k.scalar_type()),
            dkv[1].to(v.scalar_type()),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

int64_t ring_tile_rows(int64_t B, int64_t H, int64_t Tl) {
  constexpr int64_t kTileBytes = int64_t{64} << 20;
  return std::clamp(kTileBytes / std::max<int64_t>(1, B * H * Tl * 4), std::min<int64_t>(16, Tl), Tl);
}

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const ContextLayout& layout, Communicator& cp, RingKernel kernel, int64_t tile_rows) {
  if (kernel == RingKernel::kAuto) kernel = q.is_cpu() ? RingKernel::kFused : RingKernel::kTiled;
  if (kernel == RingKernel::kFused && !q.is_cpu())
    throw runtime_error("context-parallel ring: the fused block kernel runs on the CPU only; use RingKernel::kTiled");
  if (tile_rows <= 0) tile_rows = ring_tile_rows(q.size(0), q.size(1), q.size(2));
  return RingAttention::apply(q, k, v, group_handle(cp), layout.places, layout.documents, layout.window,
                              static_cast<int64_t>(kernel), tile_rows);
}

}  // namespace gputrain
