#include "model/kernel_bench.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "model/architecture.h"
#include "model/cross_entropy.h"
#include "model/fused_bias_gelu.h"
#include "model/fused_norm.h"
#include "model/linear_bias_grad.h"
#include "precision/autocast_guard.h"
#include "precision/precision.h"
#include "util/device.h"
#include "util/error.h"
#include "util/ignore_index.h"
#include "util/timing.h"

namespace gputrain {

namespace {

std::string dtype_name(at::ScalarType t) {
  return t == at::kFloat ? "fp32" : t == at::kBFloat16 ? "bf16" : t == at::kHalf ? "fp16" : "other";
}

// The dtype of the activations the kernels see: autocast's, or the weights' without it.
at::ScalarType activation_dtype(const Precision& precision) {
  return precision.uses_autocast() ? precision.autocast_dtype() : precision.weight_dtype();
}

// The rows every kernel sees: one micro-batch's tokens.
int64_t token_rows(const Settings& s) { return s.train.per_device_batch_size * s.model.seq_len; }

// "[rows, width]", the start of each row's shape column.
std::string matrix_shape(int64_t rows, int64_t width) {
  return "[" + std::to_string(rows) + ", " + std::to_string(width) + "]";
}

// Gradients of leaves are dropped before each repetition, so no
// accumulation kernel is timed on either side.
void clear_grads(std::initializer_list<at::Tensor*> leaves) {
  for (at::Tensor* t : leaves) t->mutable_grad() = at::Tensor();
}

KernelBenchRow bench_add_norm(const Settings& s, const Precision& precision, const torch::Device& device,
                              int64_t repeats) {
  const int64_t rows = token_rows(s), d = s.model.d_model;
  const bool rms = architecture(s.model).norm == NormKind::kRmsNorm;
  const at::ScalarType stream = precision.weight_dtype();
  // Under autocast the branch (a linear layer's output) and the norm's consumer are in autocast's dtype.
  const at::ScalarType low = activation_dtype(precision);
  const auto opts = at::TensorOptions().device(device);
  at::Tensor x = at::randn({rows, d}, opts.dtype(stream)).requires_grad_(true);
  at::Tensor branch = at::randn({rows, d}, opts.dtype(low)).requires_grad_(true);
  at::Tensor weight = at::ones({d}, opts.dtype(stream)).requires_grad_(true);
  at::Tensor bias = rms ? at::Tensor() : at::zeros({d}, opts.dtype(stream)).requires_grad_(true);
  at::Tensor grad_out = at::randn({rows, d}, opts.dtype(low)), grad_sum = at::randn({rows, d}, opts.dtype(stream));
  FusedNormParams p;
  p.weight = weight;
  if (!rms) p.bias = bias;
  p.rms = rms;
  p.eps = s.model.norm_eps;
  KernelBenchRow row;
  row.op = std::string("residual add + ") + (rms ? "RMSNorm" : "LayerNorm");
  row.shape = matrix_shape(rows, d) + " stream " + dtype_name(stream) + ", branch/out " + dtype_name(low);
  row.aten_ms = mean_ms(device, repeats, [&] {
    clear_grads({&x, &branch, &weight, &bias});
    at::Tensor h = x + branch;
    at::Tensor y =
        rms ? at::rms_norm(h, {d}, weight, s.model.norm_eps) : at::layer_norm(h, {d}, weight, bias, s.model.norm_eps);
    torch::autograd::backward({y.to(low), h}, {grad_out, grad_sum});  // .to: the cast autocast's linear makes
  });
  AutocastGuard autocast(precision.uses_autocast(), device.type(), low);
  if (!fused_norm_available(x, branch, p))
    throw usage_error("kernels bench: the fused norm does not take " + row.shape);
  row.fused_ms = mean_ms(device, repeats, [&] {
    clear_grads({&x, &branch, &weight, &bias});
    auto [h, y] = fused_add_norm(x, branch, p);
    torch::autograd::backward({y, h}, {grad_out, grad_sum});
  });
  // Forward reads x, branch; writes sum, out. Backward reads grad_out, sum, grad_sum; writes grad x (+ grad branch).
  const double sr = static_cast<double>(at::elementSize(stream)), sl = static_cast<double>(at::elementSize(low));
  const double per_element = (sr + sl + sr + sl) + (sl + sr + sr + sr + (low != stream ? sl : 0));
  row.fused_gb_per_s = per_element * static_cast<double>(rows * d) / (row.fused_ms * 1e6);
  return row;
}

KernelBenchRow bench_cross_entropy(const Settings& s, const Precision& precision, const torch::Device& device,
                                   int64_t repeats) {
  const int64_t rows = token_rows(s), vocab = s.model.padded_vocab();
  const at::ScalarType dtype = activation_dtype(precision);
  const auto opts = at::TensorOptions().device(device);
  at::Tensor logits = (at::randn({rows, vocab}, opts) * 2).to(dtype).requires_grad_(true);
  at::Tensor targets = at::randint(0, s.model.vocab_size, {rows}, opts.dtype(at::kLong));
  KernelBenchRow row;
  row.op = "cross-entropy (sum over rows)";
  row.shape = matrix_shape(rows, vocab) + " " + dtype_name(dtype);
  row.aten_ms = mean_ms(device, repeats, [&] {
    clear_grads({&logits});
    cross_entropy_sum_reference(logits, targets, kIgnoreIndex).backward();
  });
  if (!fused_cross_entropy_available(logits))
    throw usage_error("kernels bench: the fused cross-entropy does not take " + row.shape);
  row.fused_ms = mean_ms(device, repeats, [&] {
    clear_grads({&logits});
    fused_cross_entropy_sum(logits, targets, kIgnoreIndex).backward();
  });
  // Forward reads the logits; backward reads them and writes their gradient.
  row.fused_gb_per_s =
      3.0 * static_cast<double>(at::elementSize(dtype)) * static_cast<double>(rows * vocab) / (row.fused_ms * 1e6);
  return row;
}

KernelBenchRow bench_bias_gelu(const Settings& s, const Precision& precision, const torch::Device& device,
                               int64_t repeats) {
  const int64_t rows = token_rows(s), width = mlp_hidden(s.model);
  const at::ScalarType dtype = activation_dtype(precision);
  const auto opts = at::TensorOptions().device(device);
  at::Tensor y = at::randn({rows, width}, opts.dtype(dtype)).requires_grad_(true);
  at::Tensor bias = at::zeros({width}, opts.dtype(precision.weight_dtype())).requires_grad_(true);
  at::Tensor grad_out = at::randn({rows, width}, opts.dtype(dtype));
  KernelBenchRow row;
  row.op = "bias + GELU(tanh), with the bias gradient";
  row.shape = matrix_shape(rows, width) + " " + dtype_name(dtype) + ", bias " + dtype_name(precision.weight_dtype());
  // ATen: the bias is in cuBLAS's epilogue (y here stands for the biased product); GELU, its
  // backward and the bias gradient's reduction are separate kernels.
  row.aten_ms = mean_ms(device, repeats, [&] {
    clear_grads({&y});
    torch::autograd::backward({at::gelu(y, "tanh")}, {grad_out});
    at::Tensor bias_grad = y.grad().sum(0);
  });
  if (!fused_bias_gelu_available(y, bias))
    throw usage_error("kernels bench: the fused bias + GELU does not take " + row.shape);
  row.fused_ms = mean_ms(device, repeats, [&] {
    clear_grads({&y, &bias});
    torch::autograd::backward({fused_bias_gelu(y, bias)}, {grad_out});
  });
  // Forward reads y, writes out; backward reads y and the gradient, writes y's gradient.
  row.fused_gb_per_s =
      5.0 * static_cast<double>(at::elementSize(dtype)) * static_cast<double>(rows * width) / (row.fused_ms * 1e6);
  return row;
}

// A linear layer's bias gradient (model/linear_bias_grad.h): the column sums of its output
// gradient [rows, width], against ATen's sum(0), which the backward of at::linear runs.
KernelBenchRow bench_bias_gradient(const Settings& s, const Precision& precision, const torch::Device& device,
                                   int64_t repeats, int64_t width) {
  const int64_t rows = token_rows(s);
  const at::ScalarType dtype = activation_dtype(precision);
  at::Tensor g = at::randn({rows, width}, at::TensorOptions().device(device).dtype(dtype));
  KernelBenchRow row;
  row.op = "linear layer's bias gradient (column sums)";
  row.shape = matrix_shape(rows, width) + " " + dtype_name(dtype);
  row.aten_ms = mean_ms(device, repeats, [&] { at::Tensor b = g.sum(0); });
  row.fused_ms = mean_ms(device, repeats, [&] { at::Tensor b = linear_bias_gradient(g); });
  // Reads the gradient once (the partial rows, 256 x width fp32, are small beside it).
  row.fused_gb_per_s =
      static_cast<double>(at::elementSize(dtype)) * static_cast<double>(rows * width) / (row.fused_ms * 1e6);
  return row;
}

// The output widths of the model's linear layers whose bias gradient the kernels reduce:
// q/k/v and the two projections back to d_model, and a SwiGLU MLP's input (a GELU MLP's c_fc
// bias is reduced by the bias + GELU kernel instead). Only the layers that have biases.
std::vector<int64_t> biased_linear_widths(const ModelSettings& m) {
  const LinearBiases biases = linear_biases(m);
  std::vector<int64_t> widths;
  if (biases.qkv) widths.push_back(m.q_width() + 2 * m.kv_width());
  if (biases.out || biases.mlp) widths.push_back(m.d_model);
  if (biases.mlp && architecture(m).mlp == MlpKind::kSwiGlu)
    widths.push_back(architecture(m).mlp_fc_rows(mlp_hidden(m)));
  std::sort(widths.begin(), widths.end());
  widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
  return widths;
}

}  // namespace

KernelBenchResult bench_kernels(const Settings& s, int64_t repeats) {
  const torch::Device device = resolve_device(s.run.device);
  if (!device.is_cuda())
    throw usage_error("kernels bench times the CUDA kernels: run it on a GPU (run.device: cuda or auto), not on " +
                      device.str());
  if (!cuda_build()) throw usage_error("kernels bench: this gputrain was built without CUDA kernels");
  const Precision precision(s.precision, device);
  torch::manual_seed(static_cast<uint64_t>(s.run.seed));
  KernelBenchResult r;
  r.device = device_name(device);
  r.rows.push_back(bench_add_norm(s, precision, device, repeats));
  if (architecture(s.model).mlp == MlpKind::kGelu) r.rows.push_back(bench_bias_gelu(s, precision, device, repeats));
  for (int64_t width : biased_linear_widths(s.model))
    r.rows.push_back(bench_bias_gradient(s, precision, device, repeats, width));
  r.rows.push_back(bench_cross_entropy(s, precision, device, repeats));
  return r;
}

std::string kernel_bench_table(const KernelBenchResult& r) {
  std::string out = "| op | shape | ATen ms | fused ms | speedup | fused GB/s |\n|---|---|---:|---:|---:|---:|\n";
  char line[512];
  for (const auto& row : r.rows) {
    std::snprintf(line, sizeof line, "| %s | %s | %.3f | %.3f | %.2fx | %.0f |\n", row.op.c_str(), row.shape.c_str(),
                  row.aten_ms, row.fused_ms, row.aten_ms / row.fused_ms, row.fused_gb_per_s);
    out += line;
  }
  return out;
}

}  // namespace gputrain
