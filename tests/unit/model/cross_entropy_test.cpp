// The CPU cross-entropy in row chunks (model/cross_entropy_cpu.cpp) against a float64 reference
// computed by ATen from the same logits: the loss (fp32 arithmetic) and the gradient (in the logits'
// dtype), with ignored rows, several chunks and a strided row layout; and its gradient written over
// the logits where the caller allows it.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "test_util.h"
#include "model/cross_entropy.h"

using namespace gputrain;
using gputrain::test::rel_error;

TEST_CASE("model: the CPU cross-entropy in row chunks matches a float64 reference, loss and gradient", "[model]") {
  // 50304 classes: 20 rows a chunk, so 37 rows take two; 1001: one chunk.
  for (int64_t vocab : {1001, 50304})
    for (auto dtype : {at::kBFloat16, at::kHalf}) {
      at::manual_seed(static_cast<uint64_t>(vocab) + static_cast<uint64_t>(dtype));
      const int64_t rows = 37;
      at::Tensor wide = (at::randn({rows, vocab + 8}) * 3).to(dtype);
      at::Tensor logits = wide.narrow(1, 0, vocab);  // rows vocab + 8 elements apart
      at::Tensor targets = at::randint(0, vocab, {rows}, at::kLong);
      targets.index_put_({at::indexing::Slice(0, 5)}, -100);  // rows without a target
      INFO("vocab " << vocab << ", " << dtype);

      at::Tensor ref_in = logits.to(at::kDouble).requires_grad_(true);
      at::Tensor ref = at::cross_entropy_loss(ref_in, targets, {}, at::Reduction::Sum, -100);
      ref.backward(at::full({}, 0.25, at::kDouble));  // an incoming gradient other than 1

      at::Tensor in = logits.detach().requires_grad_(true);
      REQUIRE(chunked_cross_entropy_applies(in));
      CHECK_FALSE(chunked_cross_entropy_applies(in.detach().to(at::kFloat)));  // fp32: ATen's own path
      at::Tensor got = cross_entropy_sum(in, targets, -100);
      CHECK(got.scalar_type() == at::kFloat);
      got.backward(at::full({}, 0.25, at::kFloat));
      CHECK(rel_error(got, ref.detach()) < 1e-5);
      REQUIRE(in.grad().scalar_type() == dtype);
      const double grad_bound = dtype == at::kBFloat16 ? 1e-2 : 2e-3;
      CHECK(rel_error(in.grad(), ref_in.grad()) < grad_bound);
      CHECK(in.grad().slice(0, 0, 5).abs().max().item<double>() == 0.0);  // ignored rows: exactly zero
    }
}

TEST_CASE("model: the CPU cross-entropy writes the gradient over logits only the loss reads", "[model]") {
  at::manual_seed(5);
  at::Tensor weight = at::randn({64, 32}).to(at::kBFloat16).requires_grad_(true);
  at::Tensor x = at::randn({40, 32}).to(at::kBFloat16);
  at::Tensor targets = at::randint(0, 64, {40}, at::kLong);
  auto grad_of = [&](LogitsAfterLoss after, at::Tensor* logits_out) {
    weight.mutable_grad() = at::Tensor();
    at::Tensor logits = at::linear(x, weight);  // the head's output: a temporary only the loss reads
    cross_entropy_sum(logits, targets, -100, after).backward();
    if (logits_out) *logits_out = logits.detach();
    return weight.grad().clone();
  };
  at::Tensor kept_logits, reused_logits;
  const at::Tensor kept = grad_of(LogitsAfterLoss::kKeep, &kept_logits);
  const at::Tensor reused = grad_of(LogitsAfterLoss::kReuseForGradient, &reused_logits);
  CHECK(at::equal(kept, reused));
  CHECK(at::equal(kept_logits, at::linear(x, weight.detach())));          // kept: the logits are intact
  CHECK_FALSE(at::equal(reused_logits, at::linear(x, weight.detach())));  // reused: they hold the gradient
  // A caller's own tensor (a leaf) is never overwritten, whatever it asks.
  at::Tensor own = at::randn({8, 64}).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor before = own.detach().clone();
  cross_entropy_sum(own, targets.narrow(0, 0, 8), -100, LogitsAfterLoss::kReuseForGradient).backward();
  CHECK(at::equal(own.detach(), before));
}
