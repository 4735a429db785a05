// Packed documents (data.*.document_attention): a window of several documents gives each document
// the logits and the gradients it has alone, on every attention path (per document on the CPU, the
// block mask, the math reference, checkpointed blocks) and every architecture; transformers agrees
// (tests/reference/hf_interop.py documents).
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "checkpoint/model_files.h"
#include "checkpoint/safetensors.h"
#include "config/recipe.h"
#include "model/activation_checkpointing.h"
#include "model/attention.h"
#include "model/gpt.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "precision/autocast_guard.h"
#include "test_util.h"
#include "util/document_layout.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t kStart = 1;  // the document-start id of these tests

// Documents of the given lengths, row after row (each row's lengths sum to T): every document is
// kStart and then random ids; `positions` count from each document's start.
struct Packed {
  torch::Tensor tokens, positions;
  std::vector<std::pair<int64_t, int64_t>> where;  // each document's row and first column
  std::vector<int64_t> lengths;
};

Packed pack(const std::vector<std::vector<int64_t>>& rows, int64_t T, int64_t vocab) {
  Packed p;
  p.tokens = at::randint(2, vocab, {static_cast<int64_t>(rows.size()), T}, at::kLong);
  p.positions = at::empty_like(p.tokens);
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t t = 0;
    for (int64_t len : rows[r]) {
      p.tokens[r][t] = kStart;
      p.positions[r].narrow(0, t, len).copy_(at::arange(len, at::kLong));
      p.where.emplace_back(static_cast<int64_t>(r), t);
      p.lengths.push_back(len);
      t += len;
    }
    REQUIRE(t == T);
  }
  return p;
}

torch::Tensor document(const torch::Tensor& x, const Packed& p, size_t i) {
  return x[p.where[i].first].narrow(0, p.where[i].second, p.lengths[i]).unsqueeze(0);
}

Gpt random_model(const ModelSettings& m) {
  torch::manual_seed(3);
  Gpt model(m);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.normal_(0.0, p.dim() == 1 ? 0.1 : 0.3);
  return model;
}

// Each architecture's shapes: GPT-2 (learned positions), Llama (grouped-query), Qwen2 (its q/k/v
// biases), Mistral with a window of 4 (shorter than most documents here).
ModelSettings arch_settings(ModelArch arch) {
  ModelSettings m = model_settings(64, 16, 2, 4, 32);
  m.arch = arch;
  m.dropout = 0.0;
  if (arch != ModelArch::kGpt) m.n_kv_head = 2;
  if (arch == ModelArch::kMistral) m.sliding_window = 4;
  return m;
}

const std::vector<std::vector<int64_t>> kRows = {{5, 9, 2}, {16}, {1, 7, 8}};

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

// The largest difference between each document's packed logits and its logits alone.
double packed_against_alone(Gpt& model, const Packed& p, const DocumentLayout& layout) {
  torch::NoGradGuard no_grad;
  model->eval();
  const torch::Tensor packed = model->forward(p.tokens, layout);
  double worst = 0;
  for (size_t i = 0; i < p.lengths.size(); ++i)
    worst = std::max(worst, max_diff(document(packed, p, i), model->forward(document(p.tokens, p, i))));
  return worst;
}

}  // namespace

TEST_CASE("packed documents: each document's logits are those it has alone, on every attention path",
          "[model][documents]") {
  for (ModelArch arch : {ModelArch::kGpt, ModelArch::kLlama, ModelArch::kQwen2, ModelArch::kMistral}) {
    for (AttentionImpl impl : {AttentionImpl::kSdpa, AttentionImpl::kMath}) {
      CAPTURE(static_cast<int>(arch), static_cast<int>(impl));
      ModelSettings m = arch_settings(arch);
      m.attention = impl;
      Gpt model = random_model(m);
      const Packed p = pack(kRows, m.seq_len, m.vocab_size);
      const DocumentLayout layout = document_layout(p.positions);
      CHECK(layout.longest == 16);
      CHECK(layout.offsets.sizes() == std::vector<int64_t>{8});  // 7 documents and the end
      CHECK(packed_against_alone(model, p, layout) < 1e-5);
      // Positions alone (a CUDA graph's static copy): attention builds the block mask from them.
      CHECK(packed_against_alone(model, p, DocumentLayout{p.positions}) < 1e-5);
      // Without the layout a later document reads the ones before it: not what it has alone.
      CHECK(packed_against_alone(model, p, {}) > 1e-2);
    }
  }
}

TEST_CASE("packed documents: the gradients are the sum of each document's own, checkpointed or not",
          "[model][documents]") {
  for (ModelArch arch : {ModelArch::kGpt, ModelArch::kMistral}) {
    for (bool checkpointed : {false, true}) {
      CAPTURE(static_cast<int>(arch), checkpointed);
      const ModelSettings m = arch_settings(arch);
      Gpt model = random_model(m);
      if (checkpointed) apply_activation_checkpointing(model, CheckpointingPolicy::kFull, 1);
      const Packed p = pack(kRows, m.seq_len, m.vocab_size);
      const torch::Tensor targets = at::randint(0, m.vocab_size, p.tokens.sizes(), at::kLong);
      model->zero_grad();
      model->loss_sum(p.tokens, targets, document_layout(p.positions)).backward();
      const std::vector<torch::Tensor> packed = gradients_of(*model);
      model->zero_grad();
      for (size_t i = 0; i < p.lengths.size(); ++i)
        model->loss_sum(document(p.tokens, p, i), document(targets, p, i)).backward();
      const std::vector<torch::Tensor> alone = gradients_of(*model);
      REQUIRE(packed.size() == alone.size());
      double worst = 0, largest = 0;
      for (size_t k = 0; k < packed.size(); ++k) {
        worst = std::max(worst, max_diff(packed[k], alone[k]));
        largest = std::max(largest, alone[k].abs().max().item<double>());
      }
      CHECK(largest > 0.1);
      CHECK(worst < 1e-5 * largest);
    }
  }
}

TEST_CASE("packed documents: with LoRA adapters and a mixture of experts, and under bf16 autocast, too",
          "[model][documents]") {
  ModelSettings m = arch_settings(ModelArch::kLlama);
  m.lora.rank = 4;
  m.moe.experts = 4;
  m.moe.capacity_factor = 0;  // no token dropped: each token's experts whatever its window mates
  Gpt model = random_model(m);
  const Packed p = pack(kRows, m.seq_len, m.vocab_size);
  CHECK(packed_against_alone(model, p, document_layout(p.positions)) < 1e-5);
  // bf16: the packed and the lone runs round differently (other matmul shapes), within bf16's precision.
  AutocastGuard autocast(true, torch::kCPU, torch::kBFloat16);
  const double largest = [&] {
    torch::NoGradGuard no_grad;
    return model->forward(p.tokens).abs().max().item<double>();
  }();
  CHECK(packed_against_alone(model, p, document_layout(p.positions)) < 2e-2 * largest);
  CHECK(packed_against_alone(model, p, {}) > 0.1 * largest);
}

TEST_CASE("packed documents: rotary positions restart at each document start", "[model][documents]") {
  const ModelSettings m = arch_settings(ModelArch::kLlama);
  RotaryEmbedding rotary(m);
  const torch::Tensor x = at::randn({2, 3, 6, m.head_width()});
  const torch::Tensor positions = torch::tensor({0, 1, 2, 0, 1, 0, 0, 1, 2, 3, 4, 5}, at::kLong).view({2, 6});
  const torch::Tensor rotated = rotary.apply(x, positions);
  // Row 0's tokens 3..4 are a document's first two: rotated as positions 0 and 1.
  CHECK(at::allclose(rotated[0].narrow(1, 3, 2), rotary.apply(x[0].narrow(1, 3, 2).unsqueeze(0))[0]));
  CHECK(at::allclose(rotated[1], rotary.apply(x[1].unsqueeze(0))[0]));
  CHECK(!at::allclose(rotated[0].narrow(1, 3, 2), rotary.apply(x[0].unsqueeze(0))[0].narrow(1, 3, 2)));
}

namespace {

// A random transformers model of `cls` with `config`, saved to dir/base (fp32), and its logits on
// each document of `p` alone (tests/reference/hf_interop.py documents); returns {ours packed, theirs}.
std::pair<torch::Tensor, torch::Tensor> against_transformers(const std::string& cls, const nlohmann::json& config,
                                                             const std::vector<std::vector<int64_t>>& rows, int64_t T) {
  TempDir dir;
  const Packed p = pack(rows, T, config["vocab_size"].get<int64_t>());
  const torch::Tensor flat = p.tokens.reshape({1, -1});
  write_safetensors(dir.file("tokens.safetensors"),
                    {{"tokens", flat}, {"lengths", torch::tensor(p.lengths, at::kLong)}});
  const nlohmann::json spec = {{"class", cls}, {"config", config}};
  const CommandResult r =
      run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/hf_interop.py", "documents", dir.file("base"),
                  dir.file("tokens.safetensors"), dir.file("theirs.safetensors"), spec.dump()});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string recipe = dir.file("recipe.yaml");
  write_file(recipe,
             "model: {init_from: base, seq_len: " + std::to_string(T) + "}\ndata: {train: {format: synthetic}}\n");
  const Settings s = load_recipe(recipe, {}, recipe_rules()).settings;
  Gpt model = build_initial_model(s, torch::kCPU, torch::kFloat);
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor ours = model->forward(p.tokens, document_layout(p.positions)).narrow(-1, 0, s.model.vocab_size);
  return {ours.reshape({1, -1, s.model.vocab_size}), *read_safetensors(dir.file("theirs.safetensors")).find("logits")};
}

nlohmann::json llama_like(nlohmann::json extra) {
  nlohmann::json c = {
      {"vocab_size", 200},        {"hidden_size", 64},        {"intermediate_size", 96},       {"num_hidden_layers", 2},
      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0}};
  if (extra.is_object()) c.update(extra);
  return c;
}

}  // namespace

TEST_CASE("packed documents: the logits are transformers' logits of each document run alone",
          "[model][documents][hf][python]") {
  const std::vector<std::vector<int64_t>> rows = {{7, 12, 5, 8}, {32}};
  const std::vector<std::pair<std::string, nlohmann::json>> models = {
      {"LlamaForCausalLM", llama_like({})},
      {"Qwen2ForCausalLM", llama_like({{"use_sliding_window", false}})},
      {"MistralForCausalLM", llama_like({{"sliding_window", 6}})},
      {"GPT2LMHeadModel",
       {{"vocab_size", 200},
        {"n_embd", 64},
        {"n_layer", 2},
        {"n_head", 4},
        {"n_positions", 64},
        {"resid_pdrop", 0.0},
        {"embd_pdrop", 0.0},
        {"attn_pdrop", 0.0}}}};
  for (const auto& [cls, config] : models) {
    CAPTURE(cls);
    const auto [ours, theirs] = against_transformers(cls, config, rows, 32);
    REQUIRE(ours.sizes() == theirs.sizes());
    CHECK(max_diff(ours, theirs) < 1e-5);
    CHECK(ours.abs().max().item<double>() > 0.05);  // not near-zeros
  }
}

TEST_CASE("a shared prompt's branches: attention in pieces (trunk, then each branch) is the mask's",
          "[model][documents]") {
  // Rows of 16: a pair (prompt 4, chosen 3, rejected 5) and padding; two packed pairs (the second's
  // chosen cut short by the row); a pair without a prompt (its completions each a document from 0).
  auto row = [](std::vector<int64_t> v) { return torch::tensor(v, torch::kLong); };
  DocumentLayout layout;
  layout.positions = torch::stack({row({0, 1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8, 0, 1, 2, 3}),
                                   row({0, 1, 2, 3, 4, 2, 0, 1, 2, 3, 4, 5, 4, 5, 6, 7}),
                                   row({0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8})});
  layout.branches = torch::stack({row({0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0}),
                                  row({0, 0, 1, 1, 1, 2, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2}),
                                  row({1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0})});
  DocumentLayout with_offsets = document_layout(layout.positions);
  with_offsets.branches = layout.branches;
  const DocumentAttention pieces(with_offsets), mask(layout);
  REQUIRE(pieces.pieces().size() == 10);  // 2 + 1 (the padding), 2 + 2, 1 + 1 + 1
  torch::manual_seed(5);
  const int64_t B = 3, H = 4, Hkv = 2, T = 16, D = 8;
  const torch::Tensor q0 = torch::randn({B, H, T, D}), k0 = torch::randn({B, Hkv, T, D}),
                      v0 = torch::randn({B, Hkv, T, D});
  const torch::Tensor upstream = torch::randn({B, H, T, D});
  auto run = [&](const DocumentAttention& how, AttentionImpl impl) {
    const torch::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(),
                        v = v0.clone().requires_grad_();
    const torch::Tensor y = attend_documents(q, k, v, how, 0, 0.0, impl);
    y.backward(upstream);
    return std::vector<torch::Tensor>{y.detach(), q.grad(), k.grad(), v.grad()};
  };
  const auto a = run(pieces, AttentionImpl::kSdpa), b = run(mask, AttentionImpl::kMath);
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(max_diff(a[i], b[i]) < 1e-5);
  }
  // The branches matter: without them, the rejected tokens would see the chosen ones.
  DocumentLayout no_branches = layout;
  no_branches.branches = torch::Tensor();
  CHECK(max_diff(run(DocumentAttention(no_branches), AttentionImpl::kMath)[0], b[0]) > 1e-2);
}
