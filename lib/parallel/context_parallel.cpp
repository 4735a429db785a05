#include "parallel/context_parallel.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <memory>

#include "parallel/group_handle.h"
#include "parallel/ring_attention.h"
#include "parallel/tensor_parallel.h"
#include "parallel/through_wire.h"
#include "util/error.h"
#include "util/ignore_index.h"

namespace gputrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x [..., Tl, D] -> [..., size x Tl, D]: every rank's tokens, in rank order. Backward: each rank's
// part of the gradient, summed over the ranks whose queries read it.
struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    Communicator& cp = group_from_handle(group);
    std::vector<int64_t> shape = x.sizes().vec();
    shape.insert(shape.begin(), cp.size());
    const torch::Tensor all = through_wire(cp, x, shape, [&](torch::Tensor& out, torch::Tensor& in) {
      return cp.all_gather(out, in, "context-parallel keys and values");
    });
    std::vector<int64_t> joined = x.sizes().vec();
    joined[joined.size() - 2] *= cp.size();
    return all.movedim(0, -3).reshape(joined);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Communicator& cp = group_from_handle(ctx->saved_data["group"].toInt());
    std::vector<int64_t> parts = g[0].sizes().vec();
    const int64_t Tl = parts[parts.size() - 2] / cp.size();
    parts[parts.size() - 2] = cp.size();
    parts.insert(parts.end() - 1, Tl);  // [..., size, Tl, D]
    const torch::Tensor by_rank = g[0].reshape(parts).movedim(-3, 0);
    std::vector<int64_t> mine = by_rank.sizes().vec();
    mine.erase(mine.begin());
    torch::Tensor grad = through_wire(cp, by_rank, mine, [&](torch::Tensor& out, torch::Tensor& in) {
      return cp.reduce_scatter_sum(out, in, "context-parallel key and value gradients");
    });
    return {grad, torch::Tensor()};
  }
};

torch::Tensor attend_gathered(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& visible, double dropout_p, AttentionImpl impl, Communicator& cp) {
  // Keys and values travel together: one gather per layer.
  const torch::Tensor kv = GatherSequence::apply(torch::stack({k, v}), group_handle(cp));
  const torch::Tensor keys = kv[0], values = kv[1];
  if (impl == AttentionImpl::kMath) return math_attention(q, keys, values, dropout_p, visible);
  return at::scaled_dot_product_attention(q, keys, values, visible, dropout_p, /*is_causal=*/false,
                                          /*scale=*/std::nullopt, /*enable_gqa=*/q.size(1) != k.size(1));
}

torch::Tensor attend_ring(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const ContextLayout& layout, double dropout_p, Communicator& cp) {
  if (dropout_p > 0)  // validate.cpp refuses the recipe; this guards other callers
    throw config_error("parallel.cp_method: ring cannot drop attention weights; set model.dropout: 0 or use allgather");
  return ring_attention(q, k, v, layout, cp);
}

// One per model, shared by its blocks: the forward's layout (and the gathering method's mask) is
// made at the first block and kept for the others, and for a checkpointed block's recomputation
// while no other batch came between.
class ContextAttention {
 public:
  ContextAttention(Communicator& cp, ContextMethod method) : cp_(cp), method_(method) {}
  torch::Tensor operator()(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const DocumentLayout& layout, int64_t window, double dropout_p, AttentionImpl impl) {
    // Holding the positions keeps their storage from being reused by another batch's.
    if (!positions_.is_same(layout.positions) || window != layout_.window) {
      layout_ = context_layout(layout.positions, layout.branches, window, cp_);
      visible_ = method_ == ContextMethod::kAllGather ? layout_.visible_all(cp_.rank()) : torch::Tensor();
      positions_ = layout.positions;
    }
    if (method_ == ContextMethod::kRing) return attend_ring(q, k, v, layout_, dropout_p, cp_);
    return attend_gathered(q, k, v, visible_, dropout_p, impl, cp_);
  }

 private:
  Communicator& cp_;
  ContextMethod method_;
  ContextLayout layout_{torch::Tensor(), torch::Tensor(), -1, torch::Tensor()};
  torch::Tensor positions_, visible_;
};

}  // namespace

Batch context_part(const Batch& b, int place, int size) {
  const int64_t B = b.input.size(0), T = b.input.size(1);
  const torch::Tensor places = context_places(T, place, size, b.input.device());
  const auto columns = [&](const torch::Tensor& t) {
    return t.defined() ? t.index_select(1, places.to(t.device())) : t;
  };
  Batch out = b;  // the pairs' fields (and the shared metric sums) as they are: they describe whole rows
  out.input = columns(b.input);
  out.target = columns(b.target);
  out.chosen_targets = columns(b.chosen_targets);
  out.target_count = out.target.ne(kIgnoreIndex).sum().item<int64_t>();
  // (No document offsets: the gathering attention masks by the positions and branches.)
  out.token_layout = DocumentLayout{};
  out.token_layout.positions = b.token_layout.defined() ? columns(b.token_layout.positions)
                                                        : places.unsqueeze(0).expand({B, places.size(0)}).contiguous();
  out.token_layout.branches = columns(b.token_layout.branches);
  return out;
}

std::vector<Batch> context_parts(const std::vector<Batch>& batches, const Communicator& cp) {
  std::vector<Batch> out;
  for (const auto& b : batches) out.push_back(context_part(b, cp.rank(), cp.size()));
  return out;
}

void parallelize_context(Gpt& model, Communicator& cp, ContextMethod method) {
  // A preference loss reads each sequence's log-probability whole: every rank gets the sum of its
  // parts, and each part's gradient is the whole loss's (the cp ranks' gradients are then summed).
  model->sequence_sums_tap = [&cp](const torch::Tensor& part_sums) {
    return reduce_from_group(part_sums, cp, "context-parallel sequence sums");
  };
  auto shared = std::make_shared<ContextAttention>(cp, method);
  for (size_t i = 0; i < model->transformer->h->size(); ++i) {
    auto& attn = *(*model->transformer->h)[i]->as<Block>()->attn;
    attn.attention_tap = [shared, impl = attn.impl](const torch::Tensor& q, const torch::Tensor& k,
                                                    const torch::Tensor& v, const DocumentLayout& layout,
                                                    int64_t window, double dropout_p) {
      return (*shared)(q, k, v, layout, window, dropout_p, impl);
    };
  }
}

torch::Tensor context_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const DocumentLayout& tokens, int64_t window, double dropout_p, AttentionImpl impl,
                                ContextMethod method, Communicator& cp) {
  const ContextLayout layout = context_layout(tokens.positions, tokens.branches, window, cp);
  if (method == ContextMethod::kRing) return attend_ring(q, k, v, layout, dropout_p, cp);
  return attend_gathered(q, k, v, layout.visible_all(cp.rank()), dropout_p, impl, cp);
}

}  // namespace gputrain
