// GPU checks of packed documents' attention (the gpu suite, which skips itself without a CUDA device):
// variable-length flash attention (bf16, a Mistral window too) and the memory-efficient kernel (fp32)
// give each document's own causal attention and its gradients; a CUDA graph's positions-only layout
// (the block mask) gives the same; Mistral's window alone uses flash's window; and a packed model on
// CUDA gives each document's logits alone.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "model/attention.h"
#include "model/gpt.h"
#include "precision/autocast_guard.h"
#include "test_util.h"
#include "util/document_layout.h"

using namespace gputrain;
using namespace gputrain::test;

namespace {

// Rows of documents of these lengths (each row's sum is T): their positions.
torch::Tensor positions_of(const std::vector<std::vector<int64_t>>& rows, int64_t T) {
  torch::Tensor p = at::empty({static_cast<int64_t>(rows.size()), T}, at::kLong);
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t t = 0;
    for (int64_t len : rows[r]) {
      p[static_cast<int64_t>(r)].narrow(0, t, len).copy_(at::arange(len, at::kLong));
      t += len;
    }
  }
  return p;
}

// Each document's causal attention alone, in fp32 on the CPU (windowed where window > 0).
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const std::vector<std::vector<int64_t>>& rows, int64_t window) {
  std::vector<torch::Tensor> out_rows;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<torch::Tensor> parts;
    int64_t t = 0;
    for (int64_t len : rows[r]) {
      auto piece = [&](const torch::Tensor& x) {
        return x[static_cast<int64_t>(r)].narrow(1, t, len).unsqueeze(0).to(at::kCPU, at::kFloat);
      };
      const torch::Tensor allowed = window > 0 ? sliding_window_mask(len, window, piece(q)) : torch::Tensor();
      parts.push_back(math_attention(piece(q), piece(k), piece(v), 0.0, allowed));
      t += len;
    }
    out_rows.push_back(at::cat(parts, 2));
  }
  return at::cat(out_rows, 0);
}

}  // namespace

TEST_CASE("gpu: packed documents' varlen attention is each document's own, forward and backward", "[gpu]") {
  const std::vector<std::vector<int64_t>> rows = {{100, 28, 300, 84}, {512}, {1, 255, 256}};
  const int64_t T = 512;
  const DocumentLayout layout = document_layout(positions_of(rows, T)).to(torch::kCUDA);
  const DocumentAttention documents(layout);
  struct Case {
    at::ScalarType dtype;
    int64_t window;
    double tolerance;
  };
  for (const Case c : {Case{at::kBFloat16, 0, 2e-2}, Case{at::kBFloat16, 64, 2e-2}, Case{at::kFloat, 0, 1e-4}}) {
    CAPTURE(c.dtype, c.window);
    torch::manual_seed(0);
    auto make = [&](int64_t heads) {
      return at::randn({3, heads, T, 64}, at::TensorOptions().device(torch::kCUDA).dtype(c.dtype)).requires_grad_(true);
    };
    const torch::Tensor q = make(8), k = make(2), v = make(2);
    const torch::Tensor ours = attend_documents(q, k, v, documents, c.window, 0.0, AttentionImpl::kSdpa);
    const torch::Tensor theirs = reference(q.detach(), k.detach(), v.detach(), rows, c.window);
    CHECK((ours.to(at::kCPU, at::kFloat) - theirs).abs().max().item<double>() < c.tolerance);
    // The block mask (positions alone, as under CUDA graphs) gives the same numbers.
    const DocumentAttention masked(DocumentLayout{layout.positions});
    const torch::Tensor by_mask = attend_documents(q, k, v, masked, c.window, 0.0, AttentionImpl::kSdpa);
    CHECK((by_mask.to(at::kFloat) - ours.to(at::kFloat)).abs().max().item<double>() < c.tolerance);
    // Gradients: the varlen kernels' backward against the mask path's.
    const torch::Tensor g = at::randn_like(ours);
    const auto grads = torch::autograd::grad({ours}, {q, k, v}, {g});
    const auto mask_grads = torch::autograd::grad({by_mask}, {q, k, v}, {g});
    for (size_t i = 0; i < 3; ++i) {
      const double scale = mask_grads[i].abs().max().item<double>();
      CHECK(scale > 0);
      CHECK((grads[i] - mask_grads[i]).abs().max().item<double>() < 5 * c.tolerance * std::max(1.0, scale));
    }
  }
}

TEST_CASE("gpu: a sliding window without documents runs through flash's own window, as the mask does", "[gpu]") {
  torch::manual_seed(2);
  auto make = [](int64_t heads) {
    return at::randn({2, heads, 256, 64}, at::TensorOptions().device(torch::kCUDA).dtype(at::kBFloat16))
        .requires_grad_(true);
  };
  const torch::Tensor q = make(8), k = make(2), v = make(2);
  const torch::Tensor flash = causal_attention(q, k, v, 32, 0.0, AttentionImpl::kSdpa);
  const torch::Tensor masked =
      math_attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), 0.0, sliding_window_mask(256, 32, q));
  CHECK((flash.to(at::kFloat) - masked).abs().max().item<double>() < 2e-2);
  const torch::Tensor g = at::randn_like(flash);
  const auto grads = torch::autograd::grad({flash}, {q, k, v}, {g});
  const auto reference = torch::autograd::grad({masked}, {q, k, v}, {g.to(at::kFloat)});
  for (size_t i = 0; i < 3; ++i)
    CHECK((grads[i].to(at::kFloat) - reference[i]).abs().max().item<double>() <
          0.1 * std::max(1.0, reference[i].abs().max().item<double>()));
}

TEST_CASE("gpu: a packed model on CUDA gives each document the logits it has alone (bf16 autocast)", "[gpu]") {
  ModelSettings m = model_settings(128, 64, 2, 4, 64);
  m.arch = ModelArch::kLlama;
  m.n_kv_head = 2;
  torch::manual_seed(1);
  Gpt model(m);
  model->to(torch::kCUDA);
  model->eval();
  const std::vector<std::vector<int64_t>> rows = {{20, 30, 14}, {64}};
  const torch::Tensor tokens = at::randint(0, 128, {2, 64}, at::TensorOptions().device(torch::kCUDA).dtype(at::kLong));
  const DocumentLayout layout = document_layout(positions_of(rows, 64)).to(torch::kCUDA);
  torch::NoGradGuard no_grad;
  AutocastGuard autocast(true, torch::kCUDA, torch::kBFloat16);
  const torch::Tensor packed = model->forward(tokens, layout).to(at::kFloat);
  double worst = 0;
  int64_t t = 0;
  for (int64_t len : rows[0]) {
    const torch::Tensor alone = model->forward(tokens[0].narrow(0, t, len).unsqueeze(0)).to(at::kFloat);
    worst = std::max(worst, (packed[0].narrow(0, t, len) - alone[0]).abs().max().item<double>());
    t += len;
  }
  CHECK(worst < 5e-2);  // bf16 matmuls: flash and the causal kernel round differently
}
