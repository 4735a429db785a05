// The fused bias + GELU(tanh) kernels (kernels/bias_gelu.cuh) against a
// float64 reference from ATen on the CPU: the activation, the gradient of
// the bias-free product and the bias gradient, for the dtype pairs the MLP
// produces (fp32; bf16/fp16 products with an fp32 bias under autocast;
// bf16-pure), GPT-2's width and the narrowest vector widths, and row counts
// that leave some backward chunks empty; then the MLP on CUDA (which takes
// the fused path) against the same MLP on the CPU.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "model/fused_bias_gelu.h"
#include "model/gpt.h"
#include "test_util.h"

using namespace gputrain;
using gputrain::test::rel_error;

namespace {

double bound_for(at::ScalarType t) { return t == at::kFloat ? 1e-5 : t == at::kBFloat16 ? 1e-2 : 2e-3; }

}  // namespace

TEST_CASE("gpu: the fused bias + GELU matches a float64 reference, forward and backward", "[gpu]") {
  const std::vector<std::pair<at::ScalarType, at::ScalarType>> pairs = {
      {at::kFloat, at::kFloat}, {at::kBFloat16, at::kFloat}, {at::kHalf, at::kFloat}, {at::kBFloat16, at::kBFloat16}};
  for (auto [dtype, bias_dtype] : pairs)
    for (int64_t width : {3072, 8, 24})
      for (int64_t rows : {37, 1000}) {
        if (width % (dtype == at::kFloat ? 4 : 8) != 0) continue;
        INFO(dtype << " product, " << bias_dtype << " bias, width " << width << ", rows " << rows);
        at::manual_seed(static_cast<uint64_t>(width + rows));
        // Pre-activations over GELU's curved range (-4..4), never zeros.
        at::Tensor y = (at::randn({rows, width}) * 1.5).to(dtype);
        at::Tensor bias = (0.5 * at::randn({width})).to(bias_dtype);
        at::Tensor grad_out = at::randn({rows, width}).to(dtype);

        at::Tensor y64 = y.to(at::kDouble).requires_grad_(true), b64 = bias.to(at::kDouble).requires_grad_(true);
        at::Tensor ref = at::gelu(y64 + b64, "tanh");
        ref.backward(grad_out.to(at::kDouble));

        at::Tensor yc = y.cuda().requires_grad_(true), bc = bias.cuda().requires_grad_(true);
        REQUIRE(fused_bias_gelu_available(yc, bc));
        at::Tensor out = fused_bias_gelu(yc, bc);
        REQUIRE(out.scalar_type() == dtype);
        CHECK(rel_error(out, ref.detach()) < bound_for(dtype));
        out.backward(grad_out.cuda());
        REQUIRE(yc.grad().scalar_type() == dtype);
        REQUIRE(bc.grad().scalar_type() == bias_dtype);
        CHECK(rel_error(yc.grad(), y64.grad()) < bound_for(dtype));
        CHECK(rel_error(bc.grad(), b64.grad()) < std::max(bound_for(dtype), bound_for(bias_dtype)));
        CHECK(yc.grad().isfinite().all().item<bool>());
      }
  // Not taken: a width off the vector width, a strided product, a CPU tensor, a bias of a third dtype.
  at::Tensor y = at::randn({4, 12}).to(at::kBFloat16).cuda();
  CHECK_FALSE(fused_bias_gelu_available(y, at::zeros({12}).cuda()));
  at::Tensor wide = at::randn({16, 8}).to(at::kBFloat16).cuda();
  CHECK_FALSE(fused_bias_gelu_available(wide.t(), at::zeros({16}).cuda()));
  CHECK_FALSE(fused_bias_gelu_available(wide.cpu(), at::zeros({8})));
  CHECK_FALSE(fused_bias_gelu_available(wide, at::zeros({8}).to(at::kHalf).cuda()));
}

TEST_CASE("gpu: the MLP with the fused bias + GELU matches the CPU's", "[gpu]") {
  torch::manual_seed(1);
  ModelSettings cfg = test::model_settings(64, 32, 1, 4, 128);
  Mlp cpu(cfg), gpu(cfg);
  {
    torch::NoGradGuard no_grad;
    auto src = cpu->parameters(), dst = gpu->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  gpu->to(torch::kCUDA);
  at::Tensor x = at::randn({4, 32, 128});
  at::Tensor ref = cpu->forward(x), got = gpu->forward(x.cuda());
  CHECK(rel_error(got, ref.detach().to(at::kDouble)) < 1e-5);
  ref.pow(2).sum().backward();
  got.pow(2).sum().backward();
  auto named_cpu = cpu->named_parameters(), named_gpu = gpu->named_parameters();
  for (const auto& item : named_cpu) {
    INFO(item.key());
    CHECK(rel_error(named_gpu[item.key()].grad(), item.value().grad().to(at::kDouble)) < 1e-5);
  }
}
