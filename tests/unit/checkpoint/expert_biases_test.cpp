// trainer.json's moe_expert_bias: what a run writes reads back as every mixture layer's bias, and a
// section that is not this model's is a DataError naming the checkpoint, the layer and the fix.
#include <catch2/catch.hpp>

#include "checkpoint/expert_biases.h"
#include "util/error.h"

using namespace gputrain;
using Catch::Contains;

TEST_CASE("expert biases: written and read back for every mixture layer, refused where not the model's",
          "[checkpoint][moe]") {
  ModelSettings m;
  m.n_layer = 4;
  m.moe.experts = 3;
  m.moe.every = 2;  // blocks 1 and 3
  const std::map<int64_t, torch::Tensor> bias = {{1, torch::tensor({0.5f, -0.25f, 0.f})},
                                                 {3, torch::tensor({-1.f, 2.f, 0.125f})}};
  const nlohmann::json saved = expert_biases_json(bias);
  CHECK(saved.size() == 2);
  CHECK(saved["transformer.h.3.mlp"] == nlohmann::json({-1.0, 2.0, 0.125}));
  const auto back = read_expert_biases(saved, m, "ckpt", "name another checkpoint");
  REQUIRE(back.size() == 2);
  for (const auto& [block, b] : bias) CHECK(at::equal(back.at(block), b));

  auto refused = [&](const nlohmann::json& j, const std::string& says) {
    INFO(j.dump());
    try {
      read_expert_biases(j, m, "ckpt", "name another checkpoint");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kData);
      CHECK_THAT(e.what(), Contains("checkpoint 'ckpt'") && Contains(says) && Contains("fix: name another checkpoint"));
    }
  };
  nlohmann::json missing = saved;
  missing.erase("transformer.h.1.mlp");
  refused(missing, "no 3 biases for transformer.h.1.mlp");
  nlohmann::json short_list = saved;
  short_list["transformer.h.3.mlp"] = {1.0, 2.0};
  refused(short_list, "no 3 biases for transformer.h.3.mlp");
  nlohmann::json words = saved;
  words["transformer.h.3.mlp"] = {1.0, "two", 3.0};
  refused(words, "no 3 biases for transformer.h.3.mlp");
  nlohmann::json extra = saved;
  extra["transformer.h.0.mlp"] = {0.0, 0.0, 0.0};
  refused(extra, "has 3 mixture layers, this model 2");
  refused(nlohmann::json::array(), "no 3 biases for transformer.h.1.mlp");
}
