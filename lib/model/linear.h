// The model's linear layer, y = x W^T + b, with optional taps around its
// product (and LoRA's) so that code outside the model can change where the
// input comes from and where the output goes without the model knowing
// (DESIGN rule 1): tensor parallelism (parallel/tensor_parallel.h) installs
// its communication here. Without taps it is one at::linear call, the bias in the matmul's
// epilogue (LibTorch's nn::Linear spells a 3-D input as matmul then `+= bias`,
// which under autocast is a separate type-casting kernel).
#pragma once
#include <torch/nn/module.h>

#include <functional>
#include <memory>

namespace gputrain {

struct QuantizedWeight;

struct LinearImpl : torch::nn::Module {
  // Initialized as torch::nn::Linear is (Kaiming-uniform weight, uniform bias), drawing the same
  // random numbers, so a model's initial weights do not depend on which of the two it uses.
  LinearImpl(int64_t in_features, int64_t out_features, bool bias);
  torch::Tensor forward(const torch::Tensor& x);

  // LoRA (model/lora.h): registers lora_A [rank, in] (Kaiming-uniform) and
  // lora_B [out, rank] (zero); forward adds scale * dropout(x) A^T B^T.
  void add_lora(int64_t rank, double scale, double dropout);

  // The weight as the product reads it: weight_copy under bf16 autocast when one is set (model/weight_copy.h).
  torch::Tensor product_weight() const;

  // QLoRA (model/quantized_weight.h): the frozen weight from now on in 4 bits; the weight parameter goes.
  void set_quantized(std::shared_ptr<const QuantizedWeight> w);

  torch::Tensor weight, bias;    // [out, in], [out] (undefined without bias)
  torch::Tensor weight_copy;     // bf16 copy of weight, set and kept current from outside (train/weight_copies.h)
  torch::Tensor lora_A, lora_B;  // undefined without LoRA
  std::shared_ptr<const QuantizedWeight> quantized;  // set: `weight` is undefined
  double lora_scale = 0, lora_dropout = 0;
  bool lora_off = false;  // the adapters skipped: the base alone (DPO's reference, model/lora.h AdaptersOff)
  using Tap = std::function<torch::Tensor(const torch::Tensor&)>;
  Tap input_tap;   // applied to x before the product
  Tap output_tap;  // applied to x W^T before the bias is added
  // Set: LoRA reads x itself (not input_tap's result) and applies this to its rank-r product x A^T
  // before B (tensor parallelism sums or copies that small product instead of the layer's).
  Tap lora_tap;
};
TORCH_MODULE(Linear);

}  // namespace gputrain
