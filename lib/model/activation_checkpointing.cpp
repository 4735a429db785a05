#include "model/activation_checkpointing.h"

#include <torch/autograd.h>

#include "precision/autocast_guard.h"
#include "util/device.h"

namespace gputrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local bool replaying = false;

// What backward needs besides the saved input. Held by the autograd context
// as a capsule, so it is freed with the graph even if backward never runs.
struct Replay : torch::CustomClassHolder {
  Replay(BlockImpl* b, RngSnapshot r, AutocastState a, torch::Device d)
      : block(b), rng(std::move(r)), autocast(a), device(d) {}
  BlockImpl* block;
  RngSnapshot rng;
  AutocastState autocast;
  torch::Device device;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, BlockImpl* block) {
    const torch::Device device = x.device();
    ctx->saved_data["replay"] = c10::IValue::make_capsule(
        c10::make_intrusive<Replay>(block, capture_rng(device), current_autocast(device.type()), device));
    ctx->save_for_backward({x});
    return block->forward(x);  // Function::apply runs this without recording a graph
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    // Replay the forward's random numbers, then put the outer stream back.
    const RngSnapshot outer = capture_rng(replay->device);
    restore_rng(replay->rng);
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      AutocastGuard autocast(replay->autocast.enabled, replay->autocast.device, replay->autocast.dtype);
      replaying = true;
      try {
        y = replay->block->forward(x);
      } catch (...) {
        replaying = false;
        throw;
      }
      replaying = false;
    }
    restore_rng(outer);
    // backward (not grad) also accumulates the block's parameter gradients.
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpointed_block_forward(BlockImpl& block, const torch::Tensor& x) {
  // Without grad mode (evaluation) there is nothing to save or recompute.
  if (!torch::GradMode::is_enabled()) return block.forward(x);
  return CheckpointFunction::apply(x, &block);
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
