#include "parallel/tensor_parallel.h"

#include <torch/autograd.h>

#include "model/architecture.h"
#include "parallel/group_handle.h"
#include "parallel/rank_layout.h"
#include "util/error.h"

namespace gputrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Communicator& group_of(AutogradContext* ctx) { return group_from_handle(ctx->saved_data["group"].toInt()); }

torch::Tensor all_reduced(const torch::Tensor& t, Communicator& group, const char* what) {
  torch::Tensor out = t.contiguous().clone();
  group.all_reduce_sum_now(out, what);
  return out;
}

struct CopyToGroup : torch::autograd::Function<CopyToGroup> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_reduced(g[0], group_of(ctx), "tensor-parallel input gradient"), torch::Tensor()};
  }
};

struct ReduceFromGroup : torch::autograd::Function<ReduceFromGroup> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group, const char* what) {
    ctx->saved_data["group"] = group;
    return all_reduced(x, group_from_handle(group), what);
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], torch::Tensor(), torch::Tensor()}; }
};

// Replaces a parameter's data by this rank's slice (the Variable, and so its name, stays).
void keep_shard(torch::Tensor& p, const TensorShard& s, int rank, int size) {
  torch::NoGradGuard no_grad;
  p.set_data(shard_of(p.detach(), s, rank, size).clone());
}

}  // namespace

torch::Tensor copy_to_group(const torch::Tensor& x, Communicator& group) {
  return CopyToGroup::apply(x, group_handle(group));
}
torch::Tensor reduce_from_group(const torch::Tensor& x, Communicator& group, const char* what) {
  return ReduceFromGroup::apply(x, group_handle(group), what);
}

std::vector<TensorShard> parallelize_tensor(Gpt& model, Communicator& tp) {
  const int rank = tp.rank(), size = tp.size();
  const ModelSettings& cfg = model->cfg;
  if (cfg.n_head % size != 0 || cfg.kv_heads() % size != 0 || mlp_hidden(cfg) % size != 0)
    throw config_error("parallel.tp (" + std::to_string(size) + ") must divide model.n_head (" +
                       std::to_string(cfg.n_head) + "), model.n_kv_head (" + std::to_string(cfg.kv_heads()) +
                       ") and the MLP width (" + std::to_string(mlp_hidden(cfg)) + ")");
  if (cfg.moe.enabled())  // validate refuses this first; this guards other callers
    throw config_error("parallel.tp > 1 does not split mixture-of-experts layers in this version");
  // Each split parameter keeps this rank's slice of parallel/rank_layout.h's split.
  std::vector<TensorShard> shards;
  for (auto& item : model->named_parameters()) {
    shards.push_back(tensor_split_of(item.key(), cfg));
    if (shards.back().dim >= 0) keep_shard(item.value(), shards.back(), rank, size);
  }
  for (size_t i = 0; i < model->transformer->h->size(); ++i) {
    auto* block = (*model->transformer->h)[i]->as<Block>();
    auto& attn = *block->attn;
    auto& mlp = *block->mlp;
    attn.n_head = cfg.n_head / size;
    attn.n_kv_head = cfg.kv_heads() / size;
    const LinearImpl::Tap copy = [&tp](const torch::Tensor& x) { return copy_to_group(x, tp); };
    const LinearImpl::Tap reduce = [&tp](const torch::Tensor& y) { return reduce_from_group(y, tp); };
    // LoRA (rank r) splits as its layer: a column-parallel layer's lora_B by rows, its lora_A whole,
    // the product x A^T copied in (its gradient all-reduced, so A's is whole); a row-parallel layer's
    // lora_A by columns, its lora_B whole, the partial x A^T summed before B. Only [tokens, r] travels.
    for (auto* col : {&attn.c_attn, &mlp.c_fc}) {
      (*col)->input_tap = copy;
      (*col)->lora_tap = copy;
    }
    for (auto* row : {&attn.c_proj, &mlp.c_proj}) {
      (*row)->output_tap = reduce;
      (*row)->lora_tap = reduce;
    }
  }
  return shards;
}

}  // namespace gputrain
