#include "parallel/ring_attention.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
torch::Tensor block_scores(const torch::Tensor& q_rows, const torch::Tensor& keys, const torch::Tensor& visible) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q_rows.size(-1)));
  return at::matmul(q_rows.to(torch::kFloat), keys.transpose(-2, -1))
      .mul_(scale)
      .masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
}

// One tile's float32 output and log-sum-exp against a block ([B, H, rows, D], [B, H, rows]; -inf
// where a row sees none of the block).
struct TileResult {
  torch::Tensor out, lse;
};

// A block's keys and values repeated for every query head, in the kernel's dtype.
struct BlockKeys {
  torch::Tensor keys, values;
};

// How a tile of query rows attends to one block and gets its gradients (RingKernel). q, the
// block's keys and values and the output y are in the compute dtype; gradients in float32.
struct TileAttention {
  RingKernel kernel;

  BlockKeys keys_of(const torch::Tensor& kv, int64_t heads) const {
    if (kernel == RingKernel::kFused) return {per_query_head(kv[0], heads), per_query_head(kv[1], heads)};
    return {per_query_head(kv[0].to(torch::kFloat), heads), per_query_head(kv[1].to(torch::kFloat), heads)};
  }
  TileResult forward(const torch::Tensor& q, const BlockKeys& b, const torch::Tensor& visible) const {
    if (kernel == RingKernel::kFused) {  // ATen's CPU flash kernel (a row that sees nothing gets lse 0 from it)
      auto [out, lse] =
          at::_scaled_dot_product_flash_attention_for_cpu(q, b.keys, b.values, 0.0, false, additive(visible, q));
      return {out.to(torch::kFloat),
              lse.masked_fill(visible.any(-1).logical_not(), -std::numeric_limits<float>::infinity())};
    }
    const torch::Tensor scores = block_scores(q, b.keys, visible);
    const torch::Tensor lse = scores.logsumexp(-1);
    return {at::matmul((scores - finite(lse).unsqueeze(-1)).exp_(), b.values), lse};
  }
  // Adds the rows' query gradients into dq and the block's (per query head) into dk and dv. The
  // weights are recomputed from the whole window's log-sum-exp, so each block's share is exact.
  void backward(const torch::Tensor& q, const BlockKeys& b, const torch::Tensor& visible, const torch::Tensor& dout,
                const torch::Tensor& y, const torch::Tensor& lse, torch::Tensor dq, torch::Tensor& dk,
                torch::Tensor& dv) const {
    if (kernel == RingKernel::kFused) {
      auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          dout.to(q.scalar_type()), q, b.keys, b.values, y, lse, 0.0, false, additive(visible, q));
      dq.add_(gq);
      dk.add_(gk);
      dv.add_(gv);
      return;
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const torch::Tensor q32 = q.to(torch::kFloat);
    const torch::Tensor delta = (dout * y.to(torch::kFloat)).sum(-1);  // each row's sum of weight x its gradient
    const torch::Tensor weights = (block_scores(q32, b.keys, visible) - finite(lse).unsqueeze(-1)).exp_();
    dv.add_(at::matmul(weights.transpose(-2, -1), dout));
    const torch::Tensor dscores =
        weights.mul_(at::matmul(dout, b.values.transpose(-2, -1)).sub_(delta.unsqueeze(-1))).mul_(scale);
    dq.add_(at::matmul(dscores, b.keys));
    dk.add_(at::matmul(dscores.transpose(-2, -1), q32));
  }

 private:
  static torch::Tensor additive(const torch::Tensor& visible, const torch::Tensor& like) {
    return torch::zeros(visible.sizes(), like.options())
        .masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
  }
};

// Merges a tile's attention into the running output and log-sum-exp rows (the exact softmax over both).
void merge(torch::Tensor out, torch::Tensor lse, const TileResult& tile) {
  const torch::Tensor merged = at::logaddexp(lse, tile.lse), base = finite(merged);
  out.mul_((lse - base).exp_().unsqueeze(-1)).add_(tile.out * (tile.lse - base).exp_().unsqueeze(-1));
  lse.copy_(merged);
}

// The tiles of Tl query rows, `rows` at a time: (first row, rows) pairs.
std::vector<std::pair<int64_t, int64_t>> tiles(int64_t Tl, int64_t rows) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t r0 = 0; r0 < Tl; r0 += rows) out.emplace_back(r0, std::min(rows, Tl - r0));
  return out;
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t group, const torch::Tensor& places,
                               const torch::Tensor& documents, const torch::Tensor& branches, int64_t window,
                               int64_t kernel, int64_t tile_rows) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // the merges stay float32
    Communicator& cp = group_from_handle(group);
    const ContextLayout layout{places, documents, window, branches.numel() > 0 ? branches : torch::Tensor()};
    const TileAttention attend{static_cast<RingKernel>(kernel)};
    const int n = cp.size(), me = cp.rank();
    torch::Tensor out = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
    torch::Tensor lse =
        torch::full({q.size(0), q.size(1), q.size(2)}, -std::numeric_limits<float>::infinity(), out.options());
    torch::Tensor kv = torch::stack({k, v}).detach();
    for (int s = 0; s < n; ++s) {
      std::optional<RingPass> next;
      if (s + 1 < n) next.emplace(cp, kv, kKeysTag, "context-parallel ring keys and values");
      const BlockKeys block = attend.keys_of(kv, q.size(1));
      for (const auto& [r0, rows] : tiles(q.size(2), tile_rows)) {
        const torch::Tensor visible = layout.visible(me, (me + n - s) % n, r0, rows);
        if (!visible.any().item<bool>()) continue;  // hidden by the window or the documents: skipped
        merge(out.narrow(2, r0, rows), lse.narrow(2, r0, rows), attend.forward(q.narrow(2, r0, rows), block, visible));
      }
      if (next) kv = next->finish();
    }
    // The output is kept as returned (in q's dtype, as flash attention keeps it).
    const torch::Tensor y = out.to(q.scalar_type());
    ctx->save_for_backward({q, k, v, y, lse, places, documents, branches});
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
    const ContextLayout layout{saved[5], saved[6], ctx->saved_data["window"].toInt(),
                               saved[7].numel() > 0 ? saved[7] : torch::Tensor()};
    const TileAttention attend{static_cast<RingKernel>(ctx->saved_data["kernel"].toInt())};
    const int64_t tile_rows = ctx->saved_data["tile_rows"].toInt(), H = q.size(1), Hkv = k.size(1);
    Communicator& cp = group_from_handle(ctx->saved_data["group"].toInt());
    const int n = cp.size(), me = cp.rank();
    const torch::Tensor dout = g[0].to(torch::kFloat);
    torch::Tensor dq = torch::zeros(q.sizes(), dout.options());
    torch::Tensor kv = torch::stack({k, v});
    std::optional<RingPass> sums;  // the block at hand's key and value gradients from the ranks before
    for (int s = 0; s < n; ++s) {
      std::optional<RingPass> next;
      if (s + 1 < n) next.emplace(cp, kv, kBackwardKeysTag, "context-parallel ring keys and values (backward)");
      const BlockKeys block = attend.keys_of(kv, H);
      torch::Tensor dk = torch::zeros(block.keys.sizes(), dout.options()), dv = torch::zeros_like(dk);
      for (const auto& [r0, rows] : tiles(q.size(2), tile_rows)) {
        const torch::Tensor visible = layout.visible(me, (me + n - s) % n, r0, rows);
        if (!visible.any().item<bool>()) continue;
        attend.backward(q.narrow(2, r0, rows), block, visible, dout.narrow(2, r0, rows), y.narrow(2, r0, rows),
                        lse.narrow(2, r0, rows), dq.narrow(2, r0, rows), dk, dv);
      }
      torch::Tensor mine = torch::stack({per_kv_head(dk, Hkv), per_kv_head(dv, Hkv)});
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
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

int64_t ring_tile_rows(int64_t B, int64_t H, int64_t Tl) {
  constexpr int64_t kTileBytes = int64_t{64} << 20;
  return std::clamp(kTileBytes / std::max<int64_t>(1, B * H * Tl * 4), std::min<int64_t>(16, Tl), Tl);
}

double ring_working_bytes(int64_t B, int64_t H, int64_t q_width, int64_t kv_width, int64_t Tl, double element,
                          bool float32_tiles) {
  const double tokens = static_cast<double>(B) * static_cast<double>(Tl);
  const double kv = static_cast<double>(kv_width), qw = static_cast<double>(q_width);
  const double blocks = 3 * tokens * 2 * kv * (element + 4);  // at hand, sent, received: values and gradients
  const double per_query_head = tokens * 2 * qw * ((float32_tiles ? 4 : element) + 4 + (float32_tiles ? 0 : element));
  const double tile_pairs =
      static_cast<double>(B) * static_cast<double>(ring_tile_rows(B, H, Tl)) * static_cast<double>(Tl);
  const double tile = float32_tiles ? tile_pairs * (1 + static_cast<double>(H) * 4 * 3) : tile_pairs * (1 + element);
  return blocks + per_query_head + tile;
}

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const ContextLayout& layout, Communicator& cp, RingKernel kernel, int64_t tile_rows) {
  if (kernel == RingKernel::kAuto) kernel = q.is_cpu() ? RingKernel::kFused : RingKernel::kTiled;
  if (kernel == RingKernel::kFused && !q.is_cpu())
    throw runtime_error("context-parallel ring: the fused block kernel runs on the CPU only; use RingKernel::kTiled");
  if (tile_rows <= 0) tile_rows = ring_tile_rows(q.size(0), q.size(1), q.size(2));
  // (No branches: an empty tensor, as an autograd function's inputs must have a device.)
  const torch::Tensor branches =
      layout.branches.defined() ? layout.branches : torch::empty({0}, layout.places.options());
  return RingAttention::apply(q, k, v, group_handle(cp), layout.places, layout.documents, branches, layout.window,
                              static_cast<int64_t>(kernel), tile_rows);
}

}  // namespace gputrain
