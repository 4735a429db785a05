// The fused CUDA cross-entropy against a float64 reference computed by ATen
// on the CPU from the same logits: the loss (fp32 arithmetic: relative error
// well under 1e-5) and the gradient (in the logits' dtype: fp32 ~1e-6, bf16
// and fp16 within their rounding), on vector and element paths, with ignored
// rows, a target outside the vocabulary, and a strided row layout.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>

#include "test_util.h"
#include "model/cross_entropy.h"

using namespace gputrain;
using gputrain::test::rel_error;

TEST_CASE("gpu: the fused cross-entropy matches a float64 reference, loss and gradient", "[gpu]") {
  // vocab 50304 and 1000 take the 16-byte vector path, 1001 the element path; rows cover partial blocks.
  for (int64_t vocab : {1001, 1000, 50304})
    for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      at::manual_seed(static_cast<uint64_t>(vocab) + static_cast<uint64_t>(dtype));
      const int64_t rows = 37;
      // Logits spread like a trained model's (a few large, most small), fresh per case, never zeros.
      at::Tensor logits = (at::randn({rows, vocab}) * 3).to(dtype);
      at::Tensor targets = at::randint(0, vocab, {rows}, at::kLong);
      targets.index_put_({at::indexing::Slice(0, 5)}, -100);  // rows without a target
      INFO("vocab " << vocab << ", " << dtype);

      at::Tensor ref_in = logits.to(at::kDouble).requires_grad_(true);
      at::Tensor ref = at::cross_entropy_loss(ref_in, targets, {}, at::Reduction::Sum, -100);
      ref.backward(at::full({}, 0.25, at::kDouble));  // an incoming gradient other than 1

      at::Tensor in = logits.cuda().requires_grad_(true);
      REQUIRE(fused_cross_entropy_available(in));
      at::Tensor got = fused_cross_entropy_sum(in, targets.cuda(), -100);
      CHECK(got.scalar_type() == at::kFloat);
      got.backward(at::full({}, 0.25, at::kFloat).cuda());
      CHECK(rel_error(got.cpu(), ref.detach()) < 1e-5);
      REQUIRE(in.grad().scalar_type() == dtype);
      const double grad_bound = dtype == at::kFloat ? 1e-5 : dtype == at::kBFloat16 ? 1e-2 : 2e-3;
      CHECK(rel_error(in.grad().cpu(), ref_in.grad()) < grad_bound);
      CHECK(in.grad().isfinite().all().item<bool>());
      // Ignored rows get exactly zero gradient.
      CHECK(in.grad().slice(0, 0, 5).abs().max().item<double>() == 0.0);
      // The reference path (ATen on an fp32 copy) gives the same loss.
      CHECK(rel_error(cross_entropy_sum_reference(logits.cuda(), targets.cuda(), -100).cpu(), ref.detach()) < 1e-5);
    }
}

TEST_CASE("gpu: the fused cross-entropy reads strided rows and flags a target outside the vocabulary", "[gpu]") {
  at::manual_seed(3);
  at::Tensor wide = at::randn({16, 520}, at::kFloat).to(at::kBFloat16).cuda();
  at::Tensor logits = wide.slice(1, 0, 512);  // rows 520 elements apart
  at::Tensor targets = at::randint(0, 512, {16}, at::kLong);
  at::Tensor ref = at::cross_entropy_loss(logits.cpu().to(at::kDouble), targets, {}, at::Reduction::Sum, -100);
  CHECK(rel_error(fused_cross_entropy_sum(logits, targets.cuda(), -100).cpu(), ref) < 1e-5);
  targets[3] = 512;
  CHECK(std::isnan(fused_cross_entropy_sum(logits, targets.cuda(), -100).item<double>()));
}

TEST_CASE("gpu: the model's loss writes the logits' gradient over the logits", "[gpu]") {
  at::manual_seed(5);
  for (bool strided : {false, true}) {
    INFO((strided ? "strided rows" : "contiguous rows"));
    at::Tensor leaf = (at::randn({24, strided ? 1010 : 1000}) * 3).to(at::kBFloat16).cuda().requires_grad_(true);
    at::Tensor targets = at::randint(0, 1000, {24}, at::kLong);
    targets[2] = -100;
    at::Tensor ref_in = leaf.detach().slice(1, 0, 1000).cpu().to(at::kDouble).requires_grad_(true);
    at::cross_entropy_loss(ref_in, targets, {}, at::Reduction::Sum, -100).backward();

    // A temporary made from the leaf, as the head's output is: its memory becomes the gradient.
    at::Tensor logits = (leaf * 1).slice(1, 0, 1000);
    const void* storage = logits.data_ptr();
    at::Tensor loss = fused_cross_entropy_sum(logits, targets.cuda(), -100, LogitsAfterLoss::kReuseForGradient);
    loss.backward({}, /*retain_graph=*/true);
    CHECK(rel_error(leaf.grad().slice(1, 0, 1000).cpu(), ref_in.grad()) < 1e-2);
    CHECK(leaf.grad().slice(0, 2, 3).abs().max().item<double>() == 0.0);  // the ignored row
    // The logits' memory now holds that gradient (the same bits), and nothing else was allocated for it.
    CHECK(logits.data_ptr() == storage);
    CHECK(at::equal(logits.detach(), leaf.grad().slice(1, 0, 1000)));
    // A second backward through the same graph would read the overwritten logits: autograd refuses.
    CHECK_THROWS_WITH(loss.backward(), Catch::Contains("modified by an inplace operation"));
  }
  // A leaf, or a view of one, is the caller's own tensor and is never overwritten.
  at::Tensor own = at::randn({8, 1000}).to(at::kBFloat16).cuda().requires_grad_(true);
  const at::Tensor before = own.detach().clone();
  const at::Tensor some_targets = at::randint(0, 1000, {8}, at::kLong).cuda();
  for (const at::Tensor& logits : {own, own.view({8, 1000})})
    fused_cross_entropy_sum(logits, some_targets, -100, LogitsAfterLoss::kReuseForGradient).backward();
  CHECK(at::equal(own.detach(), before));
}
