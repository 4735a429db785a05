// Initial weights as a function of (seed, parameter name, element): any part of a parameter computed
// alone equals the same part of the whole, and the numbers are GPT-2's N(0, 0.02).
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include "model/gpt.h"
#include "model/initial_values.h"
#include "test_util.h"

using namespace gputrain;

namespace {
constexpr uint64_t kSeed = 1234;
}  // namespace

TEST_CASE("meta build: initial values do not depend on how a parameter is cut", "[model][meta]") {
  torch::manual_seed(kSeed);
  Gpt whole(test::model_settings(64, 16, 2, 4, 32));
  const torch::Tensor w = whole->transformer->h[0]->as<Block>()->attn->c_attn->weight.detach();
  // Rows 5..9, columns 3, 7 and 30 computed alone.
  WholeIndex part{at::arange(5, 10, at::kLong), at::tensor({3, 7, 30}, at::kLong), w.size(1)};
  torch::Tensor got = at::empty({5, 3});
  const std::string name = "transformer.h.0.attn.c_attn.weight";
  fill_initial(got, name, initial_distribution(name, w.sizes(), whole->cfg), kSeed, part);
  CHECK(torch::equal(got, w.index({at::indexing::Slice(5, 10)}).index_select(1, part.cols)));
  // The numbers are N(0, 0.02) and differ with the seed and the name.
  CHECK(std::abs(w.std().item<double>() - 0.02) < 0.002);
  CHECK(std::abs(w.mean().item<double>()) < 0.002);
  torch::manual_seed(kSeed + 1);
  CHECK(!torch::equal(Gpt(whole->cfg)->transformer->h[0]->as<Block>()->attn->c_attn->weight, w));
  const torch::Tensor w1 = whole->transformer->h[1]->as<Block>()->attn->c_attn->weight;
  CHECK(!torch::equal(w1, w));
  CHECK(std::abs(at::corrcoef(at::stack({w.flatten(), w1.flatten()}))[0][1].item<double>()) < 0.05);
}
