// The linear layer whose backward sums the bias gradient with our column-sum
// kernels (model/linear_bias_grad.h, kernels/column_sum.cuh) against a float64
// reference from ATen on the CPU: the output, and the input, weight and bias
// gradients, in fp32 and under bf16 autocast, for widths the vector path
// takes (768, 2304) and one it does not (12: ATen's sum), with row counts
// below and above the 256 partial rows; then Linear modules on CUDA against
// the CPU.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "test_util.h"
#include "model/linear.h"
#include "model/linear_bias_grad.h"
#include "precision/autocast_guard.h"

using namespace gputrain;
using gputrain::test::rel_error;

TEST_CASE("gpu: the linear layer's bias-gradient kernel matches a float64 reference", "[gpu]") {
  for (bool autocast : {false, true})
    for (int64_t out : {768, 2304, 12})
      for (int64_t rows : {37, 4100}) {
        INFO((autocast ? "bf16 autocast" : "fp32") << ", out " << out << ", rows " << rows);
        at::manual_seed(static_cast<uint64_t>(out + rows));
        const int64_t in = 64;
        at::Tensor x = at::randn({rows / 2 + 1, 2, in}), w = at::randn({out, in}) * 0.1, b = at::randn({out});
        at::Tensor grad_out = at::randn({rows / 2 + 1, 2, out});
        at::Tensor x64 = x.to(at::kDouble).requires_grad_(true), w64 = w.to(at::kDouble).requires_grad_(true),
                   b64 = b.to(at::kDouble).requires_grad_(true);
        at::Tensor ref = at::linear(x64, w64, b64);
        ref.backward(grad_out.to(at::kDouble));

        at::Tensor xc = x.cuda().requires_grad_(true), wc = w.cuda().requires_grad_(true),
                   bc = b.cuda().requires_grad_(true);
        REQUIRE(linear_bias_grad_applies(xc, bc));
        at::Tensor y;
        {
          AutocastGuard guard(autocast, at::kCUDA, at::kBFloat16);
          y = linear_with_bias_grad_kernel(xc, wc, bc);
        }
        CHECK(y.scalar_type() == (autocast ? at::kBFloat16 : at::kFloat));
        y.backward(grad_out.cuda().to(y.scalar_type()));
        const double bound = autocast ? 1e-2 : 1e-5;
        CHECK(rel_error(y, ref.detach()) < bound);
        CHECK(rel_error(xc.grad(), x64.grad()) < bound);
        CHECK(rel_error(wc.grad(), w64.grad()) < bound);
        REQUIRE(bc.grad().scalar_type() == at::kFloat);  // the parameter's dtype, as autocast's cast gives back
        CHECK(rel_error(bc.grad(), b64.grad()) < bound);
      }
  CHECK_FALSE(linear_bias_grad_applies(at::randn({2, 3}), at::randn({4})));       // CPU
  CHECK_FALSE(linear_bias_grad_applies(at::randn({2, 3}).cuda(), at::Tensor()));  // no bias
}

TEST_CASE("gpu: Linear modules on CUDA match the CPU, with and without bias", "[gpu]") {
  for (bool bias : {true, false}) {
    INFO("bias " << bias);
    torch::manual_seed(4);
    Linear cpu(96, 2304, bias), gpu(96, 2304, bias);
    {
      torch::NoGradGuard no_grad;
      auto src = cpu->parameters(), dst = gpu->parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    }
    gpu->to(torch::kCUDA);
    at::Tensor x = at::randn({3, 50, 96});
    at::Tensor ref = cpu->forward(x), got = gpu->forward(x.cuda());
    CHECK(rel_error(got, ref.detach().to(at::kDouble)) < 1e-5);
    ref.pow(2).sum().backward();
    got.pow(2).sum().backward();
    auto named = gpu->named_parameters();
    for (const auto& item : cpu->named_parameters()) {
      INFO(item.key());
      CHECK(rel_error(named[item.key()].grad(), item.value().grad().to(at::kDouble)) < 1e-5);
    }
  }
}
