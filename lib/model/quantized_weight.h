// QLoRA's frozen base (Dettmers et al. 2023): a block Linear's weight kept in 4 bits as bitsandbytes
// keeps it (precision/quantize_4bit.h), one quantized tensor per Hugging Face tensor its rows come
// from (Llama's q_proj, k_proj and v_proj apart, though our attention fuses them, so the statistics
// are bitsandbytes' own). The product dequantizes it per call in the compute dtype, forward and
// again backward, and keeps none of it: the layer's memory is its 4-bit storage.
#pragma once
#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/settings.h"
#include "precision/quantize_4bit.h"

namespace gputrain {

struct GptImpl;
struct LinearImpl;

struct QuantizedWeight {
  std::vector<Quantized4bit> pieces;  // in row order, each a band of whole rows
  int64_t out_features = 0, in_features = 0;

  // The weight [out, in] in `dtype`.
  torch::Tensor dequantize(torch::ScalarType dtype) const;
  int64_t storage_bytes() const;
};

// y = x W^T for a 4-bit W, in the autocast dtype when autocast is on (else x's); the gradient flows to
// x only (the base is frozen), W dequantized again for it.
torch::Tensor quantized_linear(const torch::Tensor& x, const std::shared_ptr<const QuantizedWeight>& w);

// Whether the parameter `name` of `shape` is a block Linear's weight that model.quantize keeps in 4
// bits (off: none is), and its 4-bit bytes (band by band): what the memory plans count.
bool is_quantized_base(const ModelSettings& m, const std::string& name, at::IntArrayRef shape);
int64_t quantized_base_bytes(const ModelSettings& m, const std::string& name, at::IntArrayRef shape);

// Each Linear of the blocks a 4-bit base covers (attention, MLP, experts; not the router), with its
// weight's name, while it still has its weight.
void for_each_base_linear(GptImpl& model, const std::function<void(const std::string&, LinearImpl&)>& f);

// Fills `out` [count, in] with rows [first, first + count) of the whole parameter `name`.
using WeightRows = std::function<void(const std::string& name, torch::Tensor& out, int64_t first, int64_t count)>;

// Rows [first, first + count) of the whole parameter `name` as files keep them in 4 bits, or nullopt
// (model/part_reader.h: a bitsandbytes folder's tensors are taken as stored, not quantized again).
using StoredBands = std::function<std::optional<Quantized4bit>(const std::string& name, int64_t first, int64_t count)>;

// Every Linear of the blocks (attention, MLP and experts; not the router) whose weight this process
// holds (`holds` its name) gets its weight in 4 bits on `device`, band by band (one Hugging Face
// tensor at a time): as `stored` holds the band, else quantized from its rows (`rows`). The weight
// parameter goes. Returns the 4-bit bytes.
int64_t quantize_frozen_base(GptImpl& model, const std::function<bool(const std::string&)>& holds,
                             const WeightRows& rows, torch::Device device, const StoredBands& stored = {});

// A model built whole (eval, generate, tests) quantized as a run's: its own weights are the rows.
int64_t quantize_whole_model(GptImpl& model, const StoredBands& stored = {});

// The base a QLoRA run trains on, for a model that keeps its weights (export's --merge-lora): each
// of those weights replaced, in place, by its 4-bit value (as above, dequantized to its dtype).
void round_base_through_4bit(GptImpl& model, const StoredBands& stored = {});

// A LoRA base's fingerprint (model/lora.h) with its quantization: a 4-bit base is another base.
std::string with_base_quantization(const std::string& fingerprint, const QuantizeSettings& q);

// The rows of each Hugging Face tensor in our parameter `name` of `shape`, in order (one band: the whole):
// model/gpt_shapes.h's fused_rows_of, so a mixture's experts are quantized per gate and up too.
std::vector<int64_t> hf_row_bands(const ModelSettings& m, const std::string& name, at::IntArrayRef shape);

Quant4Type quant4_type(QuantBase base);

}  // namespace gputrain
