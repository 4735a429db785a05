#include "model/attention.h"

#include <ATen/ATen.h>

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

DocumentAttention::DocumentAttention(DocumentLayout layout) : layout_(std::move(layout)) {
  if (layout_.offsets.defined() && layout_.offsets.is_cpu()) {
    const torch::Tensor o = layout_.offsets.to(torch::kLong).contiguous();
    starts_.assign(o.data_ptr<int64_t>(), o.data_ptr<int64_t>() + o.numel());
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

// CPU: each document's causal attention on its own. The documents are cut from the flattened
// tokens with one split each of q, k and v (whose backward is one concatenation), not with per-document
// slices (whose backward would write a whole-size gradient per document).
torch::Tensor attend_each_document(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const std::vector<int64_t>& starts, int64_t window, double dropout_p) {
  std::vector<int64_t> lengths(starts.size() - 1);
  for (size_t i = 0; i + 1 < starts.size(); ++i) lengths[i] = starts[i + 1] - starts[i];
  const auto qs = flat_tokens(q).split_with_sizes(lengths), ks = flat_tokens(k).split_with_sizes(lengths),
             vs = flat_tokens(v).split_with_sizes(lengths);
  std::vector<torch::Tensor> out(lengths.size());
  const bool grouped = q.size(1) != k.size(1);
  for (size_t i = 0; i < lengths.size(); ++i) {
    auto heads = [](const torch::Tensor& x) { return x.transpose(0, 1).unsqueeze(0); };  // [1, H, len, D]
    const int64_t len = lengths[i];
    const torch::Tensor mask = window > 0 && len > window ? sliding_window_mask(len, window, q) : torch::Tensor();
    out[i] = at::scaled_dot_product_attention(heads(qs[i]), heads(ks[i]), heads(vs[i]),
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
  // (Branches share their trunk across what the offsets call one document: only the mask says so.)
  if (impl == AttentionImpl::kSdpa && layout.offsets.defined() && !layout.branches.defined()) {
    if (!q.is_cuda() && !documents.starts().empty())
      return attend_each_document(q, k, v, documents.starts(), window, dropout_p);
    if (q.is_cuda())
      if (torch::Tensor y = attend_documents_varlen(q, k, v, layout, window, dropout_p); y.defined()) return y;
  }
  const torch::Tensor& allowed = documents.allowed(window);
  if (impl == AttentionImpl::kMath) return math_attention(q, k, v, dropout_p, allowed);
  return at::scaled_dot_product_attention(q, k, v, allowed, dropout_p, /*is_causal=*/false, std::nullopt,
                                          /*enable_gqa=*/q.size(1) != k.size(1));
}

}  // namespace gputrain
