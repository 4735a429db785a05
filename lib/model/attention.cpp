#include "model/attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace gputrain {

torch::Tensor sliding_window_mask(int64_t T, int64_t window, const torch::Tensor& like) {
  auto ones = at::ones({T, T}, like.options().dtype(at::kBool));
  return ones.tril().logical_and(ones.triu(-(window - 1)));
}

torch::Tensor math_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, double dropout_p,
                             const torch::Tensor& allowed) {
  const int64_t T = q.size(-2), group = q.size(1) / k.size(1);
  if (group > 1) {
    k = k.repeat_interleave(group, 1);
    v = v.repeat_interleave(group, 1);
  }
  auto scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  auto hidden = allowed.defined() ? allowed.logical_not() : at::ones({T, T}, q.options().dtype(at::kBool)).triu(1);
  auto att = at::softmax(scores.masked_fill(hidden, -std::numeric_limits<double>::infinity()), -1);
  if (dropout_p > 0) att = at::dropout(att, dropout_p, /*train=*/true);
  return at::matmul(att, v);
}

namespace {

// The pieces of one document [first, end) of the flattened batch whose tokens' branches are `branch`:
// its trunk (branch 0) with the first branch after it, then each further branch against the trunk.
// False where the branches are not trunk-then-branches (the mask path then decides).
bool branch_pieces(const int64_t* branch, int64_t first, int64_t end, std::vector<DocumentAttention::Piece>& out) {
  std::vector<std::pair<int64_t, int64_t>> runs;  // (start, length) of each run of one branch
  for (int64_t t = first; t < end; ++t)
    if (t == first || branch[t] != branch[t - 1]) runs.emplace_back(t, 1);
    else ++runs.back().second;
  std::vector<int64_t> seen;  // each branch one run, the trunk only first
  for (size_t r = 0; r < runs.size(); ++r) {
    const int64_t b = branch[runs[r].first];
    if ((r > 0 && b == 0) || std::find(seen.begin(), seen.end(), b) != seen.end()) return false;
    seen.push_back(b);
  }
  const int64_t trunk = branch[first] == 0 ? runs[0].second : 0;
  const auto lead = static_cast<int64_t>(out.size());
  size_t r = 0;
  DocumentAttention::Piece head;
  head.length = runs[r++].second;
  if (trunk > 0 && r < runs.size()) head.length += runs[r++].second;
  out.push_back(head);
  for (; r < runs.size(); ++r) {
    DocumentAttention::Piece p;
    p.length = runs[r].second;
    if (trunk > 0) {
      p.trunk_piece = lead, p.trunk = trunk;
      const torch::Tensor i = torch::arange(p.length).unsqueeze(1), j = torch::arange(trunk + p.length).unsqueeze(0);
      p.mask = (j < trunk).logical_or(j - trunk <= i);
    }
    out.push_back(p);
  }
  return true;
}

}  // namespace

DocumentAttention::DocumentAttention(DocumentLayout layout) : layout_(std::move(layout)) {
  if (!layout_.offsets.defined() || !layout_.offsets.is_cpu()) return;
  const torch::Tensor o = layout_.offsets.to(torch::kLong).contiguous();
  const int64_t* starts = o.data_ptr<int64_t>();
  const torch::Tensor b = layout_.branches.defined() ? layout_.branches.cpu().contiguous() : torch::Tensor();
  for (int64_t d = 0; d + 1 < o.numel(); ++d) {
    if (!b.defined()) {
      pieces_.push_back({starts[d + 1] - starts[d]});
    } else if (!branch_pieces(b.data_ptr<int64_t>(), starts[d], starts[d + 1], pieces_)) {
      pieces_.clear();
      return;
    }
  }
}

const torch::Tensor& DocumentAttention::allowed(int64_t window) const {
  if (allowed_.defined()) return allowed_;
  torch::NoGradGuard no_grad;
  const torch::Tensor& positions = layout_.positions;
  const int64_t T = positions.size(1);
  const torch::Tensor document = document_ids(positions);
  torch::Tensor pairs = document.unsqueeze(2) == document.unsqueeze(1);  // [B, T (query), T (key)]
  pairs = pairs.logical_and(window > 0 && T > window ? sliding_window_mask(T, window, positions)
                                                     : at::ones({T, T}, positions.options().dtype(at::kBool)).tril());
  if (const torch::Tensor& b = layout_.branches; b.defined())  // a key in the trunk, or in the query's branch
    pairs = pairs.logical_and(b.unsqueeze(1).eq(0).logical_or(b.unsqueeze(2) == b.unsqueeze(1)));
  allowed_ = pairs.unsqueeze(1);
  return allowed_;
}

namespace {

// Whether flash attention takes q [.., D] (bf16/fp16, a head width it supports) on a CUDA device.
bool flash_applies(const torch::Tensor& q) {
  const int64_t D = q.size(-1);
  return q.is_cuda() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) && D % 8 == 0 && D <= 256;
}

// [B, H, T, D] -> [B x T, H, D] (a view where the heads are views of one projection, as model/gpt.h's are).
torch::Tensor flat_tokens(const torch::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)});
}

// [B x T, H, D] -> [B, H, T, D] (a view).
torch::Tensor batch_heads(const torch::Tensor& y, int64_t B) {
  return y.view({B, y.size(0) / B, y.size(1), y.size(2)}).transpose(1, 2);
}

// CPU: each piece's attention on its own (DocumentAttention::Piece: a document, or a shared prompt's
// trunk and branches). The pieces are cut from the flattened tokens with one split each of q, k and
// v (whose backward is one concatenation), not with per-piece slices (whose backward would write a
// whole-size gradient per piece).
torch::Tensor attend_pieces(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const std::vector<DocumentAttention::Piece>& pieces, int64_t window, double dropout_p) {
  std::vector<int64_t> lengths;
  for (const auto& p : pieces) lengths.push_back(p.length);
  const auto qs = flat_tokens(q).split_with_sizes(lengths), ks = flat_tokens(k).split_with_sizes(lengths),
             vs = flat_tokens(v).split_with_sizes(lengths);
  std::vector<torch::Tensor> out(lengths.size());
  const bool grouped = q.size(1) != k.size(1);
  for (size_t i = 0; i < lengths.size(); ++i) {
    auto heads = [](const torch::Tensor& x) { return x.transpose(0, 1).unsqueeze(0); };  // [1, H, len, D]
    const DocumentAttention::Piece& p = pieces[i];
    torch::Tensor keys = ks[i], values = vs[i], mask = p.mask;
    if (p.trunk_piece >= 0) {  // a branch: the trunk's keys first
      const auto t = static_cast<size_t>(p.trunk_piece);
      keys = at::cat({ks[t].narrow(0, 0, p.trunk), keys});
      values = at::cat({vs[t].narrow(0, 0, p.trunk), values});
    } else if (window > 0 && p.length > window) {
      mask = sliding_window_mask(p.length, window, q);
    }
    out[i] = at::scaled_dot_product_attention(heads(qs[i]), heads(keys), heads(values),
                                              mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt,
                                              dropout_p, /*is_causal=*/!mask.defined(), std::nullopt, grouped)
                 .squeeze(0)
                 .transpose(0, 1);
  }
  return batch_heads(at::cat(out, 0), q.size(0));
}

// CUDA: the flattened batch as one variable-length batch of documents. Flash attention takes
// bf16/fp16 and grouped keys/values as they are; the memory-efficient kernel takes fp32, one
// key/value head per query head, and no window. Undefined where neither applies.
torch::Tensor attend_documents_varlen(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const DocumentLayout& layout, int64_t window, double dropout_p) {
  const int64_t D = q.size(-1);
  if (flash_applies(q)) {
    std::optional<int64_t> left, right;
    if (window > 0) left = window - 1, right = 0;
    auto out = at::_flash_attention_forward(flat_tokens(q), flat_tokens(k), flat_tokens(v), layout.offsets,
                                            layout.offsets, layout.longest, layout.longest, dropout_p,
                                            /*is_causal=*/true, /*return_debug_mask=*/false, std::nullopt, left, right);
    return batch_heads(std::get<0>(out), q.size(0));
  }
  if (q.scalar_type() != at::kFloat || window > 0 || D % 4 != 0) return {};
  const int64_t group = q.size(1) / k.size(1);
  auto spread = [&](const torch::Tensor& x) {
    torch::Tensor flat = flat_tokens(x);
    return (group > 1 ? flat.repeat_interleave(group, 1) : flat).unsqueeze(0);  // [1, B x T, H, D]
  };
  const bool needs_grad = torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad());
  auto out = at::_efficient_attention_forward(flat_tokens(q).unsqueeze(0), spread(k), spread(v), std::nullopt,
                                              layout.offsets, layout.offsets, layout.longest, layout.longest, dropout_p,
                                              /*custom_mask_type=*/1 /* causal from the top left */, needs_grad);
  return batch_heads(std::get<0>(out).squeeze(0), q.size(0));
}

}  // namespace

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t window,
                               double dropout_p, AttentionImpl impl) {
  const int64_t T = q.size(2);
  const bool windowed = window > 0 && T > window;
  if (windowed && impl == AttentionImpl::kSdpa && flash_applies(q)) {
    // [B, T, H, D] views, as the kernel takes them; keys window - 1 back to the query itself.
    auto out = at::_flash_attention_forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), std::nullopt,
                                            std::nullopt, T, T, dropout_p, /*is_causal=*/true,
                                            /*return_debug_mask=*/false, std::nullopt, window - 1, 0);
    return std::get<0>(out).transpose(1, 2);
  }
  const torch::Tensor allowed = windowed ? sliding_window_mask(T, window, q) : torch::Tensor();
  if (impl == AttentionImpl::kMath) return math_attention(q, k, v, dropout_p, allowed);
  return at::scaled_dot_product_attention(q, k, v,
                                          allowed.defined() ? std::optional<at::Tensor>(allowed) : std::nullopt,
                                          dropout_p, /*is_causal=*/!allowed.defined(), std::nullopt,
                                          /*enable_gqa=*/q.size(1) != k.size(1));
}

torch::Tensor attend_documents(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const DocumentAttention& documents, int64_t window, double dropout_p,
                               AttentionImpl impl) {
  const DocumentLayout& layout = documents.layout();
  const bool branches = layout.branches.defined();
  if (impl == AttentionImpl::kSdpa && layout.offsets.defined()) {
    // (The pieces of branches know no window; varlen attention knows no branches.)
    if (!q.is_cuda() && !documents.pieces().empty() && !(branches && window > 0))
      return attend_pieces(q, k, v, documents.pieces(), window, dropout_p);
    if (q.is_cuda() && !branches)
      if (torch::Tensor y = attend_documents_varlen(q, k, v, layout, window, dropout_p); y.defined()) return y;
  }
  const torch::Tensor& allowed = documents.allowed(window);
  if (impl == AttentionImpl::kMath) return math_attention(q, k, v, dropout_p, allowed);
  return at::scaled_dot_product_attention(q, k, v, allowed, dropout_p, /*is_causal=*/false, std::nullopt,
                                          /*enable_gqa=*/q.size(1) != k.size(1));
}

}  // namespace gputrain
