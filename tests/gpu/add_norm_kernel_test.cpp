// The fused residual add + LayerNorm/RMSNorm kernels (kernels/add_norm.cuh)
// against a float64 reference computed by ATen on the CPU from the same
// inputs: the sum, the normalized output, and the gradients of x, the
// branch, the weight and the bias, for every dtype combination the blocks
// produce (fp32; fp32 stream with a bf16/fp16/fp32 branch under autocast;
// bf16-pure), widths that fill the lanes exactly (768), leave lanes idle
// (100), take a wide variant (1280) and the widest, whose backward reloads
// its input instead of keeping it in registers (2000, idle lanes at the
// end); then whole models on CUDA, whose
// loss and gradients must match the CPU's (which runs ATen's path).
#include <catch2/catch.hpp>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "model/activation_checkpointing.h"
#include "model/fused_norm.h"
#include "model/gpt.h"
#include "precision/autocast_guard.h"
#include "test_util.h"

using namespace gputrain;
using gputrain::test::rel_error;

namespace {

double bound_for(at::ScalarType t) { return t == at::kFloat ? 1e-5 : t == at::kBFloat16 ? 1e-2 : 2e-3; }

struct Case {
  at::ScalarType residual, branch;  // branch Undefined: normalization alone
  std::optional<at::ScalarType> autocast;
};

}  // namespace

TEST_CASE("gpu: the fused add + norm matches a float64 reference, forward and backward", "[gpu]") {
  constexpr auto kNone = at::ScalarType::Undefined;
  const std::vector<Case> cases = {
      {at::kFloat, at::kFloat, std::nullopt},       {at::kFloat, at::kBFloat16, at::kBFloat16},
      {at::kFloat, at::kHalf, at::kHalf},           {at::kFloat, at::kFloat, at::kBFloat16},
      {at::kBFloat16, at::kBFloat16, std::nullopt}, {at::kFloat, kNone, std::nullopt},
      {at::kFloat, kNone, at::kBFloat16},           {at::kBFloat16, kNone, std::nullopt}};
  for (const Case& c : cases)
    for (int64_t width : {768, 100, 1280, 2000})
      for (bool rms : {false, true}) {
        at::manual_seed(static_cast<uint64_t>(width) * 7 + (rms ? 1 : 0));
        const bool has_branch = c.branch != kNone;
        const at::ScalarType out_dtype = c.autocast.value_or(c.residual);
        INFO("residual " << c.residual << ", branch " << c.branch << ", autocast "
                         << (c.autocast ? c.autocast.value() : at::kFloat) << ", width " << width << ", rms " << rms);
        // A residual stream with an offset and a spread (never zeros), weights around 1, biases around 0.
        const int64_t rows = 37;
        at::Tensor x = (at::randn({rows, width}) * 2 + 0.5).to(c.residual);
        at::Tensor branch = has_branch ? at::randn({rows, width}).to(c.branch) : at::Tensor();
        at::Tensor weight = (1 + 0.1 * at::randn({width})).to(c.residual);
        at::Tensor bias = rms ? at::Tensor() : (0.1 * at::randn({width})).to(c.residual);
        at::Tensor grad_out = at::randn({rows, width}).to(out_dtype);
        at::Tensor grad_sum = at::randn({rows, width}).to(c.residual);

        // Reference: the sum rounded to the stream's dtype (as ATen's add gives it), then the norm in float64.
        at::Tensor x64 = x.to(at::kDouble).requires_grad_(true);
        at::Tensor b64 = has_branch ? branch.to(at::kDouble).requires_grad_(true) : at::Tensor();
        at::Tensor w64 = weight.to(at::kDouble).requires_grad_(true);
        at::Tensor bias64 = rms ? at::Tensor() : bias.to(at::kDouble).requires_grad_(true);
        at::Tensor rounded = has_branch ? (x + branch).to(at::kDouble) : x.to(at::kDouble);
        // h = the rounded sum in value, with the gradient of x + branch.
        at::Tensor h64 = has_branch ? x64 + b64 + (rounded - (x64 + b64)).detach() : x64;
        at::Tensor y64 = rms ? at::rms_norm(h64, {width}, w64, 1e-5) : at::layer_norm(h64, {width}, w64, bias64, 1e-5);
        std::vector<at::Tensor> outs = {y64}, grads = {grad_out.to(at::kDouble)};
        if (has_branch) {
          outs.push_back(h64);
          grads.push_back(grad_sum.to(at::kDouble));
        }
        torch::autograd::backward(outs, grads);

        at::Tensor xc = x.cuda().requires_grad_(true), wc = weight.cuda().requires_grad_(true);
        at::Tensor bc = has_branch ? branch.cuda().requires_grad_(true) : at::Tensor();
        at::Tensor biasc = rms ? at::Tensor() : bias.cuda().requires_grad_(true);
        FusedNormParams p;
        p.weight = wc;
        if (!rms) p.bias = biasc;
        p.rms = rms;
        at::Tensor sum, out;
        {
          AutocastGuard autocast(c.autocast.has_value(), at::kCUDA, c.autocast.value_or(at::kFloat));
          REQUIRE(fused_norm_available(xc, bc, p));
          if (has_branch) std::tie(sum, out) = fused_add_norm(xc, bc, p);
          else out = fused_norm(xc, p);
        }
        REQUIRE(out.scalar_type() == out_dtype);
        CHECK(rel_error(out, y64.detach()) < bound_for(out_dtype));
        std::vector<at::Tensor> fused_outs = {out}, fused_grads = {grad_out.cuda()};
        if (has_branch) {
          REQUIRE(sum.scalar_type() == c.residual);
          CHECK(rel_error(sum, rounded) < 1e-7);  // the same rounding as ATen's add
          fused_outs.push_back(sum);
          fused_grads.push_back(grad_sum.cuda());
        }
        torch::autograd::backward(fused_outs, fused_grads);
        CHECK(out.isfinite().all().item<bool>());
        REQUIRE(xc.grad().scalar_type() == c.residual);
        CHECK(rel_error(xc.grad(), x64.grad()) < bound_for(c.residual));
        if (has_branch) {
          REQUIRE(bc.grad().scalar_type() == c.branch);
          CHECK(rel_error(bc.grad(), b64.grad()) < bound_for(c.branch));
        }
        // The weight/bias gradients sum over rows in fp32: a little above fp32 rounding.
        const double param_bound = c.residual == at::kFloat ? 2e-5 : bound_for(c.residual);
        CHECK(rel_error(wc.grad(), w64.grad()) < param_bound);
        if (!rms) CHECK(rel_error(biasc.grad(), bias64.grad()) < param_bound);
      }
}

TEST_CASE("gpu: the fused kernels are deterministic and decline what they do not handle", "[gpu]") {
  at::manual_seed(5);
  at::Tensor x = at::randn({64, 768}).cuda().requires_grad_(true), b = at::randn({64, 768}).cuda();
  FusedNormParams p;
  p.weight = at::ones({768}).cuda().requires_grad_(true);
  p.bias = at::zeros({768}).cuda().requires_grad_(true);
  auto grad_of = [&] {
    x.mutable_grad() = at::Tensor();
    p.weight.mutable_grad() = at::Tensor();
    auto [sum, out] = fused_add_norm(x, b, p);
    (out * out.detach()).sum().backward();
    return std::make_pair(x.grad().clone(), p.weight.grad().clone());
  };
  auto first = grad_of(), second = grad_of();
  CHECK(at::equal(first.first, second.first));
  CHECK(at::equal(first.second, second.second));
  // Not taken: CPU tensors, strided inputs, a width over the limit, a weight of another dtype, fp64.
  CHECK_FALSE(fused_norm_available(x.detach().cpu(), {}, p));
  CHECK_FALSE(fused_norm_available(at::randn({768, 64}).cuda().t(), {}, p));
  FusedNormParams wide;
  wide.weight = at::ones({4096}).cuda();
  CHECK_FALSE(fused_norm_available(at::randn({2, 4096}).cuda(), {}, wide));
  FusedNormParams half_weight = p;
  half_weight.weight = p.weight.detach().to(at::kHalf);
  CHECK_FALSE(fused_norm_available(x, {}, half_weight));
  FusedNormParams f64 = p;
  f64.weight = p.weight.detach().to(at::kDouble);
  f64.bias = p.bias->detach().to(at::kDouble);
  CHECK_FALSE(fused_norm_available(x.detach().to(at::kDouble), {}, f64));
}

TEST_CASE("gpu: models with fused norms match the CPU's loss and gradients", "[gpu]") {
  for (const std::string arch : {"gpt", "llama"})
    for (bool checkpointed : {false, true}) {
      INFO(arch << (checkpointed ? ", every block checkpointed" : ""));
      torch::manual_seed(0);
      ModelSettings cfg = test::model_settings(64, 32, 3, 4, 128);
      if (arch == "llama") {
        cfg.arch = ModelArch::kLlama;
        cfg.bias = false;
        cfg.tie_embeddings = false;
        cfg.n_kv_head = 2;
      }
      Gpt cpu(cfg);
      Gpt gpu(cfg);
      {
        torch::NoGradGuard no_grad;
        auto src = cpu->parameters(), dst = gpu->parameters();
        for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
      }
      gpu->to(torch::kCUDA);
      if (checkpointed) {
        apply_activation_checkpointing(cpu, CheckpointingPolicy::kFull, 1);
        apply_activation_checkpointing(gpu, CheckpointingPolicy::kFull, 1);
      }
      auto tokens = torch::randint(0, 64, {4, 32}, torch::kLong);
      at::Tensor cpu_loss = cpu->loss_sum(tokens, tokens);
      at::Tensor gpu_loss = gpu->loss_sum(tokens.cuda(), tokens.cuda());
      cpu_loss.backward();
      gpu_loss.backward();
      CHECK(gpu_loss.item<double>() == Approx(cpu_loss.item<double>()).epsilon(1e-5));
      auto named_cpu = cpu->named_parameters(), named_gpu = gpu->named_parameters();
      for (const auto& item : named_cpu) {
        INFO(item.key());
        const at::Tensor& g = named_gpu[item.key()].grad();
        REQUIRE(g.defined());
        CHECK(rel_error(g, item.value().grad().to(at::kDouble)) < 1e-4);  // fp32 both sides, TF32 off
      }
      // Under bf16 autocast the fused path writes bf16 norm outputs; the loss stays near fp32's.
      AutocastGuard autocast(true, at::kCUDA, at::kBFloat16);
      CHECK(gpu->loss_sum(tokens.cuda(), tokens.cuda()).item<double>() ==
            Approx(cpu_loss.item<double>()).epsilon(2e-2));
    }
}
