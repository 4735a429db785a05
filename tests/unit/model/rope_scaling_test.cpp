// Rope scaling (model/rope_scaling.h) against transformers' own functions
// (modeling_rope_utils.ROPE_INIT_FUNCTIONS, through tests/reference/hf_interop.py):
// the inverse frequencies and the attention scaling of each type.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include "checkpoint/safetensors.h"
#include "model/rope_scaling.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;

namespace {

struct Case {
  const char* name;
  nlohmann::json rope;  // config.json's rope_scaling
  RopeScalingSettings ours;
  int64_t T;  // the forward's length (dynamic scaling grows past max_position_embeddings, 32 here)
};

RopeScalingSettings scaling(RopeScalingType type, double factor, int64_t original = 0) {
  RopeScalingSettings s;
  s.type = type;
  s.factor = factor;
  s.original_max_positions = original;
  return s;
}

}  // namespace

TEST_CASE("rope scaling: inverse frequencies and attention scaling equal transformers'", "[model][python]") {
  const int64_t head = 64, max_positions = 32;
  const double theta = 500000.0;
  RopeScalingSettings yarn_set = scaling(RopeScalingType::kYarn, 4.0, 16);
  yarn_set.attention_factor = 1.3;
  yarn_set.truncate = false;
  yarn_set.beta_fast = 16;
  const std::vector<Case> cases = {
      {"linear", {{"rope_type", "linear"}, {"factor", 4.0}}, scaling(RopeScalingType::kLinear, 4.0), 32},
      {"dynamic within", {{"rope_type", "dynamic"}, {"factor", 2.0}}, scaling(RopeScalingType::kDynamic, 2.0), 32},
      {"dynamic past", {{"rope_type", "dynamic"}, {"factor", 2.0}}, scaling(RopeScalingType::kDynamic, 2.0), 96},
      {"llama3",
       {{"rope_type", "llama3"},
        {"factor", 8.0},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 16}},
       [] {
         RopeScalingSettings s = scaling(RopeScalingType::kLlama3, 8.0, 16);
         return s;
       }(),
       32},
      {"yarn",
       {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}},
       scaling(RopeScalingType::kYarn, 4.0, 16),
       32},
      {"yarn with its options",
       {{"rope_type", "yarn"},
        {"factor", 4.0},
        {"original_max_position_embeddings", 16},
        {"attention_factor", 1.3},
        {"truncate", false},
        {"beta_fast", 16}},
       yarn_set,
       32}};
  for (const Case& c : cases) {
    CAPTURE(c.name);
    TempDir dir;
    const nlohmann::json spec = {{"class", "LlamaForCausalLM"},
                                 {"seq_len", c.T},
                                 {"config",
                                  {{"hidden_size", 256},
                                   {"num_attention_heads", 4},
                                   {"max_position_embeddings", max_positions},
                                   {"rope_theta", theta},
                                   {"rope_scaling", c.rope}}}};
    const CommandResult r = run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/hf_interop.py", "rope",
                                        "-", "-", dir.file("rope.safetensors"), spec.dump()});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const SafetensorsFile f = read_safetensors(dir.file("rope.safetensors"));
    const torch::Tensor theirs = *f.find("inv_freq");
    const RotaryFrequencies ours = rotary_frequencies(head, theta, c.ours, max_positions, c.T);
    REQUIRE(theirs.sizes() == ours.inverse.sizes());
    // transformers computes in float32: relative agreement to its rounding.
    CHECK(((theirs - ours.inverse).abs() / ours.inverse).max().item<double>() < 1e-5);
    CHECK(ours.attention_scale == Approx(f.find("attention_scaling")->item<double>()).epsilon(1e-6));
    CHECK_FALSE(at::allclose(ours.inverse, rotary_frequencies(head, theta, {}, max_positions, c.T).inverse) ==
                (std::string(c.name) != "dynamic within"));  // scaling changes them, except dynamic within the limit
  }
}
