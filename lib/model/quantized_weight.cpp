#include "model/quantized_weight.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <algorithm>
#include <optional>

#include "model/gpt.h"
#include "model/gpt_shapes.h"
#include "model/linear.h"

namespace gputrain {
namespace {

torch::ScalarType compute_dtype(const torch::Tensor& x) {
  const c10::DeviceType device = x.device().type();
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device) : x.scalar_type();
}

// The weight rides in the autograd context's saved_data as a capsule.
struct WeightHolder : torch::CustomClassHolder {
  explicit WeightHolder(std::shared_ptr<const QuantizedWeight> w) : weight(std::move(w)) {}
  std::shared_ptr<const QuantizedWeight> weight;
};

const QuantizedWeight* saved_weight(torch::autograd::AutogradContext* ctx) {
  return static_cast<const WeightHolder*>(ctx->saved_data["weight"].toCapsule().get())->weight.get();
}

// Forward: x W^T with W dequantized. Backward: grad W again dequantized, for x alone; nothing of W is
// saved between the two (as bitsandbytes' MatMul4Bit).
struct QuantizedMatmul : torch::autograd::Function<QuantizedMatmul> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            std::shared_ptr<const QuantizedWeight> w) {
    const torch::ScalarType dtype = compute_dtype(x);
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    ctx->saved_data["weight"] = c10::IValue::make_capsule(c10::make_intrusive<WeightHolder>(std::move(w)));
    return at::linear(x.to(dtype), saved_weight(ctx)->dequantize(dtype));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const at::Tensor grad_x = at::matmul(grads[0].to(dtype), saved_weight(ctx)->dequantize(dtype));
    return {grad_x.to(x_dtype), at::Tensor()};
  }
};

}  // namespace

Quant4Type quant4_type(QuantBase base) { return base == QuantBase::kFp4 ? Quant4Type::kFp4 : Quant4Type::kNf4; }

torch::Tensor QuantizedWeight::dequantize(torch::ScalarType dtype) const {
  torch::Tensor out =
      torch::empty({out_features, in_features}, pieces.front().codes.options().dtype(dtype));  // each band in place
  int64_t row = 0;
  for (const Quantized4bit& p : pieces) {
    torch::Tensor band = out.narrow(0, row, p.shape[0]);
    // Straight into the compute dtype, whatever the stored one, as bitsandbytes' gemm_4bit (0.50).
    dequantize_4bit_into(p, band);
    row += p.shape[0];
  }
  return out;
}

int64_t QuantizedWeight::storage_bytes() const {
  int64_t n = 0;
  for (const Quantized4bit& p : pieces) n += p.storage_bytes();
  return n;
}

torch::Tensor quantized_linear(const torch::Tensor& x, const std::shared_ptr<const QuantizedWeight>& w) {
  return QuantizedMatmul::apply(x, w);
}

bool is_quantized_base(const ModelSettings& m, const std::string& name, at::IntArrayRef shape) {
  // In the blocks every 2-D weight is a Linear's (norm scales are 1-D); the router stays as it is.
  return m.quantize.enabled() && shape.size() == 2 && name.starts_with("transformer.h.") && name.ends_with(".weight") &&
         !name.ends_with(".router.weight");
}

int64_t quantized_base_bytes(const ModelSettings& m, const std::string& name, at::IntArrayRef shape) {
  int64_t bytes = 0;
  for (int64_t rows : hf_row_bands(m, name, shape))
    bytes += quant4_storage_bytes(rows * shape[1], m.quantize.block_size, m.quantize.double_quant);
  return bytes;
}

std::vector<int64_t> hf_row_bands(const ModelSettings& m, const std::string& name, at::IntArrayRef shape) {
  // The bands Muon sees too: q, k, v and gate, up apart, each expert's gate and up as Mixtral's w1, w3.
  std::vector<int64_t> rows = fused_rows_of(m, name);
  return rows.empty() ? std::vector<int64_t>{shape[0]} : rows;
}

void for_each_base_linear(GptImpl& model, const std::function<void(const std::string&, LinearImpl&)>& f) {
  for (const auto& item : model.transformer->h->named_modules("transformer.h")) {
    auto* linear = dynamic_cast<LinearImpl*>(item.value().get());
    const std::string name = item.key() + ".weight";
    if (linear && linear->weight.defined() && is_quantized_base(model.cfg, name, linear->weight.sizes()))
      f(name, *linear);
  }
}

namespace {

// `linear`'s weight quantized one Hugging Face band at a time (each band's rows from `rows`, on the
// host), or taken as `stored` holds it in 4 bits.
std::shared_ptr<QuantizedWeight> quantize_bands(const ModelSettings& m, const std::string& name,
                                                const LinearImpl& linear, const WeightRows& rows,
                                                const StoredBands& stored) {
  const QuantizeSettings& q = m.quantize;
  auto w = std::make_shared<QuantizedWeight>();
  w->out_features = linear.weight.size(0);
  w->in_features = linear.weight.size(1);
  int64_t first = 0;
  for (int64_t band : hf_row_bands(m, name, linear.weight.sizes())) {
    if (std::optional<Quantized4bit> held = stored ? stored(name, first, band) : std::nullopt) {
      if (held->numel() != band * w->in_features)
        throw std::logic_error("quantize_bands: the stored 4-bit rows of " + name + " are not a band");
      held->shape = {band, w->in_features};
      w->pieces.push_back(std::move(*held));
      first += band;
      continue;
    }
    torch::Tensor part = torch::empty({band, w->in_features}, linear.weight.options().device(torch::kCPU));
    rows(name, part, first, band);
    w->pieces.push_back(quantize_4bit(part, quant4_type(q.base), q.block_size, q.double_quant));
    first += band;
  }
  return w;
}

}  // namespace

int64_t quantize_frozen_base(GptImpl& model, const std::function<bool(const std::string&)>& holds,
                             const WeightRows& rows, torch::Device device, const StoredBands& stored) {
  torch::NoGradGuard no_grad;
  int64_t bytes = 0;
  for_each_base_linear(model, [&](const std::string& name, LinearImpl& linear) {
    if (!holds(name)) return;
    std::shared_ptr<QuantizedWeight> w = quantize_bands(model.cfg, name, linear, rows, stored);
    for (Quantized4bit& p : w->pieces)
      for (torch::Tensor* t : {&p.codes, &p.absmax, &p.nested_absmax, &p.nested_code})
        if (t->defined()) *t = t->to(device);
    bytes += w->storage_bytes();
    linear.set_quantized(std::move(w));
  });
  return bytes;
}

namespace {

// A model's own weights as the rows to quantize.
WeightRows own_rows(GptImpl& model) {
  return [&model](const std::string& name, torch::Tensor& out, int64_t first, int64_t count) {
    out.copy_(model.named_parameters().find(name)->narrow(0, first, count));
  };
}

}  // namespace

int64_t quantize_whole_model(GptImpl& model, const StoredBands& stored) {
  const torch::Device device = model.transformer->wte->weight.device();
  return quantize_frozen_base(
      model, [](const std::string&) { return true; }, own_rows(model), device, stored);
}

void round_base_through_4bit(GptImpl& model, const StoredBands& stored) {
  torch::NoGradGuard no_grad;
  const WeightRows own = own_rows(model);
  for_each_base_linear(model, [&](const std::string& name, LinearImpl& linear) {
    linear.weight.copy_(quantize_bands(model.cfg, name, linear, own, stored)->dequantize(linear.weight.scalar_type()));
  });
}

std::string with_base_quantization(const std::string& fingerprint, const QuantizeSettings& q) {
  if (!q.enabled()) return fingerprint;
  return fingerprint + " " + quant4_type_name(quant4_type(q.base)) + " block " + std::to_string(q.block_size) +
         (q.double_quant ? " double_quant" : "");
}

}  // namespace gputrain
