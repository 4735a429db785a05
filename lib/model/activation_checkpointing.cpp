#include "model/activation_checkpointing.h"

#include <torch/autograd.h>

#include <algorithm>
#include <optional>

#include "model/linear.h"
#include "precision/autocast_guard.h"
#include "util/device.h"

namespace gputrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local bool replaying = false;

// Whether the block's forward draws random numbers: in training, any dropout (attention
// probabilities, residual, MLP, LoRA adapters' inputs), and a mixture layer, conservatively.
// Only then does the recomputation need the forward's random state; without it, it reads and
// writes no generator state, which is what lets a captured CUDA graph contain it
// (kernels.cuda_graphs: generator state cannot be read while capturing).
bool draws_random_numbers(const BlockImpl& block) {
  if (!block.is_training()) return false;
  if (block.attn->dropout > 0 || !block.moe.is_empty()) return true;
  for (const auto& m : block.modules(/*include_self=*/false)) {
    if (const auto* d = dynamic_cast<const torch::nn::DropoutImpl*>(m.get()); d && d->options.p() > 0) return true;
    if (const auto* l = dynamic_cast<const LinearImpl*>(m.get()); l && l->lora_dropout > 0) return true;
  }
  return false;
}

// What backward needs besides the saved input. Held by the autograd context
// as a capsule, so it is freed with the graph even if backward never runs.
struct Replay : torch::CustomClassHolder {
  Replay(BlockImpl* b, std::shared_ptr<const DocumentAttention> docs, std::optional<RngSnapshot> r, AutocastState a,
         torch::Device d)
      : block(b), documents(std::move(docs)), rng(std::move(r)), autocast(a), device(d) {}
  BlockImpl* block;
  std::shared_ptr<const DocumentAttention> documents;  // the forward's packed documents, or null
  std::optional<RngSnapshot> rng;                      // the forward's random state, where it drew random numbers
  AutocastState autocast;
  torch::Device device;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, BlockImpl* block,
                               std::shared_ptr<const DocumentAttention> documents) {
    const torch::Device device = x.device();
    std::optional<RngSnapshot> rng;
    if (draws_random_numbers(*block)) rng = capture_rng(device);
    ctx->saved_data["replay"] = c10::IValue::make_capsule(
        c10::make_intrusive<Replay>(block, documents, std::move(rng), current_autocast(device.type()), device));
    ctx->save_for_backward({x});
    return block->forward(x, documents.get());  // Function::apply runs this without recording a graph
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    // Replay the forward's random numbers, then put the outer stream back.
    std::optional<RngSnapshot> outer;
    if (replay->rng) {
      outer = capture_rng(replay->device);
      restore_rng(*replay->rng);
    }
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      AutocastGuard autocast(replay->autocast.enabled, replay->autocast.device, replay->autocast.dtype);
      replaying = true;
      try {
        y = replay->block->forward(x, replay->documents.get());
      } catch (...) {
        replaying = false;
        throw;
      }
      replaying = false;
    }
    if (outer) restore_rng(*outer);
    // backward (not grad) also accumulates the block's parameter gradients.
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpointed_block_forward(BlockImpl& block, const torch::Tensor& x,
                                         std::shared_ptr<const DocumentAttention> documents) {
  // Without grad mode (evaluation) there is nothing to save or recompute.
  if (!torch::GradMode::is_enabled()) return block.forward(x, documents.get());
  // Autograd calls backward (the recomputation, which also makes the block's parameter
  // gradients) only for an output that requires grad, and the function's output does only if
  // its input does. Under LoRA the first block's input comes from frozen embeddings: an input
  // that requires grad then stands in for the block's trainable parameters (its own gradient
  // is computed and dropped), as Hugging Face's enable_input_require_grads does.
  if (!x.requires_grad()) {
    const auto params = block.parameters();
    if (std::any_of(params.begin(), params.end(), [](const torch::Tensor& p) { return p.requires_grad(); }))
      return CheckpointFunction::apply(x.detach().requires_grad_(true), &block, documents);
  }
  return CheckpointFunction::apply(x, &block, std::move(documents));
}

bool recomputing_activations() { return replaying; }

int64_t apply_activation_checkpointing(Gpt& model, CheckpointingPolicy policy, int64_t every) {
  int64_t n = 0;
  int64_t i = 0;
  for (const auto& m : *model->transformer->h) {
    auto* block = m->as<Block>();
    block->checkpoint = policy == CheckpointingPolicy::kFull ||
                        (policy == CheckpointingPolicy::kSelective && i % std::max<int64_t>(every, 1) == 0);
    n += block->checkpoint;
    ++i;
  }
  return n;
}

}  // namespace gputrain
