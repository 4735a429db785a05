#include "model/moe.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>

#include "model/activation_checkpointing.h"
#include "model/gpt.h"
#include "model/gpt_shapes.h"

namespace gputrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity on the layer's output; in backward it also hands the balancing
// loss the gradient the context says (Megatron's aux-loss scaler, in effect).
struct MoeAuxGrad : torch::autograd::Function<MoeAuxGrad> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& y, const torch::Tensor& aux,
                               int64_t context) {
    ctx->saved_data["context"] = context;
    ctx->saved_data["aux"] = aux.detach();  // its dtype and device, for the gradient
    return y.view_as(y);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto* c = reinterpret_cast<const MoeContext*>(ctx->saved_data["context"].toInt());
    return {g[0], at::full_like(ctx->saved_data["aux"].toTensor(), c->aux_grad_scale), torch::Tensor()};
  }
};

}  // namespace

double moe_aux_grad_scale(const ModelSettings& m, int64_t forwards_per_layer, double loss_scale) {
  const int64_t layers = moe_layer_count(m);
  if (layers == 0 || forwards_per_layer <= 0 || m.moe.balance == MoeBalance::kBias) return 0;
  return m.moe.aux_loss_coef * loss_scale / static_cast<double>(layers * forwards_per_layer);
}

int64_t expert_capacity(double factor, int64_t tokens, int64_t top_k, int64_t experts) {
  if (factor <= 0) return 0;
  return static_cast<int64_t>(
      std::ceil(factor * static_cast<double>(tokens * top_k) / static_cast<double>(experts) - 1e-9));
}

Routing route_tokens(const torch::Tensor& probs, int64_t top_k, int64_t capacity, const torch::Tensor& choice_bias) {
  const int64_t N = probs.size(0), E = probs.size(1);
  auto [gates, chosen] = probs.topk(top_k, -1);  // [N, k], best first
  if (choice_bias.defined()) {
    chosen = std::get<1>((probs + choice_bias).topk(top_k, -1));
    gates = probs.gather(1, chosen);
  }
  // Slot-major order (every token's first choice, then every second choice):
  // an expert's queue fills with first choices before second ones.
  const torch::Tensor expert = chosen.t().reshape(-1);                          // [k N]
  const torch::Tensor gate = gates.t().reshape(-1);                             // [k N]
  const torch::Tensor token = at::arange(N, expert.options()).repeat({top_k});  // [k N]
  Routing r;
  r.chosen = chosen;
  if (capacity > 0) {
    const torch::Tensor one_hot = at::one_hot(expert, E);                      // [k N, E]
    const torch::Tensor position = (one_hot.cumsum(0) * one_hot).sum(-1) - 1;  // place in its expert's queue
    const torch::Tensor keep = position < capacity;
    r.dropped = expert.numel() - keep.sum().item<int64_t>();
    r.token = token.masked_select(keep);
    r.expert = expert.masked_select(keep);
    r.gate = gate.masked_select(keep);
  } else {
    r.token = token;
    r.expert = expert;
    r.gate = gate;
  }
  return r;
}

torch::Tensor load_balancing_loss(const torch::Tensor& probs, const torch::Tensor& chosen) {
  const int64_t E = probs.size(1);
  // f_e: the fraction of all assignments routed to e (no gradient: a count); P_e: mean probability.
  const torch::Tensor routed = at::one_hot(chosen.reshape(-1), E).to(probs.scalar_type()).mean(0);
  return static_cast<double>(E) * (routed.detach() * probs.mean(0)).sum();
}

MoeMlpImpl::MoeMlpImpl(const ModelSettings& cfg, std::shared_ptr<MoeContext> c)
    : top_k(cfg.moe.top_k), capacity_factor(cfg.moe.capacity_factor), context(std::move(c)) {
  router = register_module("router", Linear(cfg.d_model, cfg.moe.experts, /*bias=*/false));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < cfg.moe.experts; ++e) experts->push_back(Mlp(cfg));
  // Not a parameter (no gradient, nothing for ZeRO-3 to shard): checkpoints keep it in trainer.json for
  // every layer (train/expert_balance.h), whatever this rank holds.
  if (cfg.moe.balance == MoeBalance::kBias) expert_bias = torch::zeros({cfg.moe.experts}, torch::kFloat);
}

torch::Tensor MoeMlpImpl::take(torch::Tensor& load) {
  torch::Tensor out = load.defined() ? load : torch::zeros({static_cast<int64_t>(experts->size())}, torch::kLong);
  load = torch::Tensor();
  return out;
}

std::string mixture_layer_name(int64_t block) { return "transformer.h." + std::to_string(block) + ".mlp"; }

void move_expert_bias(torch::Tensor& bias, const torch::Tensor& load, double rate) {
  torch::NoGradGuard no_grad;
  const torch::Tensor error = load.mean() - load;  // > 0: below the mean, so more tokens should come
  bias.add_(at::sign(error).to(bias.scalar_type()).to(bias.device()), rate);
}

torch::Tensor MoeMlpImpl::forward(const torch::Tensor& x) {
  const int64_t d = x.size(-1);
  const torch::Tensor flat = x.reshape({-1, d});
  const int64_t N = flat.size(0), E = static_cast<int64_t>(experts->size());
  // The softmax in fp32 whatever autocast does (the product may be bf16): it decides where tokens go.
  const torch::Tensor probs = at::softmax(router(flat).to(at::kFloat), -1);  // [N, E]
  const Routing r = route_tokens(probs, top_k, expert_capacity(capacity_factor, N, top_k, E),
                                 expert_bias.defined() ? expert_bias.to(probs.device()) : expert_bias);
  // Assignments grouped by expert with one stable sort and one host read of
  // the group sizes (not a search and a sync per expert). An expert without
  // tokens still runs (on none): its parameters get zero gradients, so data
  // parallelism's per-parameter reduction hooks all fire.
  const torch::Tensor order = at::argsort(r.expert, /*stable=*/true);
  const torch::Tensor tokens = r.token.index_select(0, order);
  const torch::Tensor counts = at::bincount(r.expert, /*weights=*/{}, E).cpu();
  const std::vector<int64_t> sizes(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + E);
  const torch::Tensor rows = flat.index_select(0, tokens);
  auto run_expert = [this](int64_t e, const torch::Tensor& in) {
    return (*experts)[static_cast<size_t>(e)]->as<Mlp>()->forward(in);
  };
  torch::Tensor y;
  if (exchange) {
    y = exchange->run(rows, sizes, run_expert);
  } else {
    const std::vector<torch::Tensor> inputs = rows.split_with_sizes(sizes, 0);
    std::vector<torch::Tensor> outputs;
    for (int64_t e = 0; e < E; ++e) outputs.push_back(run_expert(e, inputs[static_cast<size_t>(e)]));
    y = at::cat(outputs, 0);
  }
  const torch::Tensor weighted = y * r.gate.index_select(0, order).unsqueeze(1).to(y.scalar_type());
  torch::Tensor out = at::zeros_like(flat).index_add(0, tokens, weighted.to(flat.scalar_type()));
  out = out.view_as(x);
  if (!is_training()) return out;
  const torch::Tensor aux = load_balancing_loss(probs, r.chosen);
  if (!recomputing_activations()) {  // a checkpointed block's replay in backward is not another forward
    const torch::Tensor load = at::bincount(r.chosen.reshape(-1), /*weights=*/{}, E);
    step_load_ = step_load_.defined() ? step_load_ + load : load;
    line_load_ = line_load_.defined() ? line_load_ + load : load;
    context->aux_sum += aux.item<double>();
    context->aux_terms += 1;
    context->assigned += N * top_k;
    context->dropped += r.dropped;
  }
  // Without grad mode (a checkpointed block's first forward) there is no graph to
  // hook; the replay in backward adds it.
  if (!torch::GradMode::is_enabled()) return out;
  return MoeAuxGrad::apply(out, aux, reinterpret_cast<int64_t>(context.get()));
}

}  // namespace gputrain
