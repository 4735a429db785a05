// QLoRA under tensor parallelism (parallel/tensor_parallel_4bit.h): each of 2 ranks' 4-bit slices
// (column-parallel rows of q, k, v, gate, up; row-parallel columns of the projections) dequantizes to
// exactly that slice of one process's dequantized 4-bit base, the offset agreed over the ranks; a slice
// that would cut a block is refused, naming the keys.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>

#include "model/gpt.h"
#include "model/linear.h"
#include "model/quantized_weight.h"
#include "parallel/rank_layout.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tensor_parallel_4bit.h"
#include "test_util.h"
#include "thread_ranks.h"
#include "util/error.h"

using namespace gputrain;

namespace {

ModelSettings sliced_llama(QuantBase base, int64_t block, bool nested) {
  ModelSettings m = test::model_settings(50, 8, 2, 4, 128);
  m.arch = ModelArch::kLlama;
  m.n_kv_head = 2;
  m.mlp_width = 256;
  m.lora.rank = 4;
  m.quantize = {base, nested, block};
  return m;
}

// Each block Linear's 4-bit weight, dequantized to float32, by its weight's name.
std::map<std::string, torch::Tensor> dequantized(GptImpl& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model.transformer->h->named_modules("transformer.h"))
    if (auto* linear = dynamic_cast<LinearImpl*>(item.value().get()); linear && linear->quantized)
      out[item.key() + ".weight"] = linear->quantized->dequantize(torch::kFloat);
  return out;
}

// Quantizes `m`'s model (seed 3) sliced over `ranks` threads; each rank's dequantized slices, by name.
std::vector<std::map<std::string, torch::Tensor>> sliced(const ModelSettings& m, int ranks) {
  std::vector<std::map<std::string, torch::Tensor>> out(static_cast<size_t>(ranks));
  test::run_thread_ranks(ranks, [&](int rank, Communicator& world) {
    torch::manual_seed(3);
    Gpt mine(m);
    parallelize_tensor(mine, world);  // keeps this rank's slices
    std::map<std::string, torch::Tensor> weights;
    for (const auto& p : mine->named_parameters()) weights[p.key()] = p.value().detach().clone();
    const WeightRows rows = [&](const std::string& name, torch::Tensor& to, int64_t first, int64_t count) {
      to.copy_(weights.at(name).narrow(0, first, count));
    };
    quantize_sliced_base(
        *mine, [](const std::string&) { return true; }, rows, {},
        [&](const std::string& name) { return tensor_split_of(name, m); }, world, torch::kCPU);
    out[static_cast<size_t>(rank)] = dequantized(*mine);
  });
  return out;
}

}  // namespace

TEST_CASE("tensor-parallel 4-bit base: 2 ranks' slices are one process's 4-bit base cut, bit for bit",
          "[parallel][quantize]") {
  struct Variant {
    QuantBase base;
    int64_t block;
    bool nested;
  };
  for (const Variant& v :
       {Variant{QuantBase::kNf4, 64, true}, Variant{QuantBase::kFp4, 32, false}, Variant{QuantBase::kNf4, 32, true}}) {
    CAPTURE(v.block, v.nested);
    const ModelSettings m = sliced_llama(v.base, v.block, v.nested);
    torch::manual_seed(3);
    Gpt whole(m);
    quantize_whole_model(*whole);
    const auto reference = dequantized(*whole);
    const auto ranks = sliced(m, 2);
    REQUIRE(reference.size() == 2 * 4);  // c_attn, attn.c_proj, c_fc, mlp.c_proj of 2 blocks
    for (int r = 0; r < 2; ++r)
      for (const auto& [name, w] : reference) {
        CAPTURE(r, name);
        REQUIRE(ranks[static_cast<size_t>(r)].count(name) == 1);
        const torch::Tensor expected = shard_of(w, tensor_split_of(name, m), r, 2);
        CHECK(at::equal(ranks[static_cast<size_t>(r)].at(name), expected));
      }
  }
}

TEST_CASE("tensor-parallel 4-bit base: a slice that would cut a block is refused, naming the keys",
          "[parallel][quantize]") {
  // tp 2 halves the projections' 128 columns into 64: not whole blocks of 128.
  const ModelSettings m = sliced_llama(QuantBase::kNf4, 128, true);
  try {
    sliced(m, 2);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("parallel.tp") && Catch::Contains("model.quantize.block_size") &&
                                          Catch::Contains("fix:"));
  }
}
