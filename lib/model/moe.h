// Mixture of experts (Shazeer et al. 2017; GShard; Switch Transformer): a
// block's MLP replaced by `experts` MLPs of the same kind (GELU or SwiGLU)
// behind a router. Each token goes to its top_k experts by softmax
// probability, and their outputs are summed weighted by those probabilities
// (not renormalized, as Switch and GShard; one expert with top_k 1 is
// exactly the dense MLP). Each expert takes at most
// ceil(capacity_factor x tokens x top_k / experts) tokens of a micro-batch,
// first choices before second ones and in token order within a choice; the
// rest are dropped (the token keeps its residual) and counted.
//
// The load-balancing loss is Switch Transformer's, experts x sum_e f_e P_e
// with f_e the fraction of routed assignments to e and P_e the mean router
// probability of e: 1 when balanced, up to `experts` when collapsed. It
// enters training through its gradient only (MoeAuxGrad below), so the
// reported loss stays the cross-entropy: backward of the block output also
// sends aux_grad_scale into the router, scaled by the trainer for
// model.moe.aux_loss_coef, the micro-batches and the loss scale.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <functional>
#include <memory>
#include <vector>

#include "config/settings.h"
#include "model/linear.h"

namespace gputrain {

// Shared by a model's mixture layers: the backward weight of the balancing
// loss, and detached statistics of the training forwards since the last reset.
struct MoeContext {
  double aux_grad_scale = 0;  // d(training loss) / d(one layer's balancing loss), for this step
  double aux_sum = 0;         // balancing-loss values summed over layer forwards
  int64_t aux_terms = 0;      // layer forwards summed
  int64_t assigned = 0;       // token-to-expert assignments (tokens x top_k)
  int64_t dropped = 0;        // of which over an expert's capacity
  void reset_stats() { aux_sum = 0, aux_terms = 0, assigned = 0, dropped = 0; }
};

// Where a mixture layer's experts run. The layer itself knows nothing of
// ranks (DESIGN rule 1): without an exchange every expert is local; expert
// parallelism (parallel/expert_parallel.h) installs one from outside that
// sends each row to the rank holding its expert and brings the outputs back.
struct ExpertExchange {
  virtual ~ExpertExchange() = default;
  // `rows` are this rank's assignments grouped by expert, sizes[e] of them for
  // expert e (every expert of the layer); `expert(e, x)` runs local expert e.
  // Returns the experts' outputs in the order of `rows`.
  using RunExpert = std::function<torch::Tensor(int64_t, const torch::Tensor&)>;
  virtual torch::Tensor run(const torch::Tensor& rows, const std::vector<int64_t>& sizes, const RunExpert& expert) = 0;
};

struct MoeMlpImpl : torch::nn::Module {
  MoeMlpImpl(const ModelSettings& cfg, std::shared_ptr<MoeContext> context);
  torch::Tensor forward(const torch::Tensor& x);

  int64_t top_k;
  double capacity_factor;
  std::shared_ptr<MoeContext> context;
  Linear router{nullptr};                    // d_model -> experts, no bias
  torch::nn::ModuleList experts{nullptr};    // Mlp each
  std::shared_ptr<ExpertExchange> exchange;  // null: every expert runs here
  // model.moe.balance: bias (DeepSeek-V3): added to the probabilities to choose each token's top_k,
  // never to the gates. float32 [experts], set from outside after each step (train/expert_balance.h);
  // undefined otherwise.
  torch::Tensor expert_bias;

  // Each expert's assignments (int64 [experts], every choice, kept or dropped) in the training
  // forwards since the last take (a checkpointed block's replay not counted twice): for the bias's
  // step and for the metrics' line, each taken on its own.
  torch::Tensor take_step_load() { return take(step_load_); }
  torch::Tensor take_line_load() { return take(line_load_); }

 private:
  torch::Tensor take(torch::Tensor& load);
  torch::Tensor step_load_, line_load_;
};
TORCH_MODULE(MoeMlp);

// How trainer.json's moe_expert_bias names block `block`'s mixture layer ("transformer.h.1.mlp").
std::string mixture_layer_name(int64_t block);

// DeepSeek-V3's update of a layer's routing bias from the step's loads (every rank's summed, float64
// [experts]): each expert's bias moves by `rate` toward the mean load (up when below it, down when above).
void move_expert_bias(torch::Tensor& bias, const torch::Tensor& load, double rate);

// The routing of `probs` [N, E] to top_k experts with `capacity` slots each
// (0 = unlimited): for each kept assignment its token, expert and gate
// (the probability); and the count of dropped ones. Exposed for tests.
struct Routing {
  torch::Tensor token, expert, gate;  // [kept]
  torch::Tensor chosen;               // [N, top_k] every choice, kept or not
  int64_t dropped = 0;
};
// `choice_bias` ([E], undefined: none) is added to the probabilities for choosing only; gates stay probabilities.
Routing route_tokens(const torch::Tensor& probs, int64_t top_k, int64_t capacity,
                     const torch::Tensor& choice_bias = {});

// Switch Transformer's balancing loss of `probs` [N, E] given the choices [N, top_k].
torch::Tensor load_balancing_loss(const torch::Tensor& probs, const torch::Tensor& chosen);

// The balancing loss's gradient per layer forward: aux_loss_coef x the mean
// over the mixture layers and the step's `forwards_per_layer` (micro-batches
// x data-parallel replicas), times the fp16 loss scale, so that the gradient
// is that of coef x the mean balancing loss of the step.
double moe_aux_grad_scale(const ModelSettings& m, int64_t forwards_per_layer, double loss_scale);

// ceil(factor x tokens x top_k / experts); 0 when factor is 0 (no limit).
int64_t expert_capacity(double factor, int64_t tokens, int64_t top_k, int64_t experts);

}  // namespace gputrain
