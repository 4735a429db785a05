// parallel.offload_optimizer nvme's optimizer: the state in a file, passed through memory a unit at
// a time, updates as the in-memory optimizer does, is read and loaded as it is, and leaves no file.
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <map>

#include "config/settings.h"
#include "model/gpt.h"
#include "optim/make_optimizer.h"
#include "optim/param_groups.h"
#include "optim/streamed_optimizer.h"
#include "test_util.h"
#include "util/error.h"

using namespace gputrain;

namespace {

OptimSettings settings_of(OptimName name) {
  OptimSettings o;
  o.name = name;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  o.adamw8bit.min_8bit_size = 64;  // the matrices get 8-bit moments, the biases stay 32-bit
  return o;
}

// Each block's parameters a unit; the embeddings and the final norm are left to the optimizer's own units.
std::vector<std::vector<std::string>> block_units(const Gpt& model, int64_t blocks) {
  std::vector<std::vector<std::string>> units(static_cast<size_t>(blocks));
  for (const auto& item : model->named_parameters())
    for (int64_t b = 0; b < blocks; ++b)
      if (item.key().rfind("transformer.h." + std::to_string(b) + ".", 0) == 0)
        units[static_cast<size_t>(b)].push_back(item.key());
  return units;
}

std::unique_ptr<StreamedOptimizer> streamed_over(Gpt& model, const OptimSettings& o, const std::string& dir,
                                                 const std::map<std::string, torch::Tensor>& copies = {}) {
  return std::make_unique<StreamedOptimizer>(
      make_param_groups(*model, o), block_units(model, model->cfg.n_layer),
      [&o](std::vector<ParamGroup> unit) { return make_optimizer(std::move(unit), o); },
      std::make_unique<OffloadFile>(dir, "parallel.offload_dir"), copies);
}

// bf16 copies of the model's matrices (what ZeRO-3 gathers under parallel.gather_dtype bf16).
std::map<std::string, torch::Tensor> bf16_copies(Gpt& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters())
    if (item.value().dim() == 2) out[item.key()] = item.value().detach().to(torch::kBFloat16);
  return out;
}

void step_all(std::vector<std::pair<Gpt*, Optimizer*>> runs, uint64_t seed, double lr) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto tokens = torch::randint(0, 64, {2, 8}, gen, torch::kLong);
  for (auto& [model, optimizer] : runs) {
    (*model)->loss_sum(tokens, tokens).backward();
    optimizer->step(lr);
    optimizer->zero_grad();
  }
}

std::map<std::string, torch::Tensor> state_of(const Optimizer& o) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& e : o.state()) out[e.name] = e.tensor.clone();
  return out;
}

void copy_weights(Gpt& from, Gpt& to) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < from->parameters().size(); ++i) to->parameters()[i].copy_(from->parameters()[i]);
}

void check_same(Gpt& a, Gpt& b) {
  for (size_t i = 0; i < a->parameters().size(); ++i) CHECK(torch::equal(a->parameters()[i], b->parameters()[i]));
}

size_t entries(const std::filesystem::path& dir) {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir), {}));
}

}  // namespace

TEST_CASE("streamed optimizer: AdamW, 8-bit AdamW and Adafactor update as in memory, a unit at a time",
          "[optim][nvme]") {
  const OptimName name = GENERATE(OptimName::kAdamW, OptimName::kAdamW8bit, OptimName::kAdafactor);
  const OptimSettings o = settings_of(name);
  const ModelSettings m = test::model_settings(64, 8, 3, 2, 16);
  test::TempDir dir;
  torch::manual_seed(3);
  Gpt plain_model(m), streamed_model(m), loaded_model(m);
  copy_weights(plain_model, streamed_model);
  auto plain = make_optimizer(make_param_groups(*plain_model, o), o);
  auto streamed = streamed_over(streamed_model, o, dir.path().string());
  // 3 blocks, then the embeddings, final norm and head in one unit of their own.
  CHECK(streamed->units() == 4);
  CHECK(entries(dir.path()) == 0);  // the file is never linked into the directory
  CHECK(streamed->state_bytes() == plain->state_bytes());
  CHECK(streamed->resident_state_bytes() < plain->state_bytes() / 20);  // step counters alone
  CHECK(streamed->largest_unit_bytes() < static_cast<uint64_t>(plain->state_bytes()) / 2);

  for (uint64_t s = 0; s < 4; ++s) step_all({{&plain_model, plain.get()}, {&streamed_model, streamed.get()}}, s, o.lr);
  check_same(plain_model, streamed_model);
  // What a checkpoint reads: the same names and values.
  const auto want = state_of(*plain), got = state_of(*streamed);
  REQUIRE(got.size() == want.size());
  for (const auto& [key, t] : want) {
    INFO(key);
    REQUIRE(got.count(key));
    CHECK(torch::equal(got.at(key), t));
  }

  // What a resume does: a fresh streamed optimizer loads the saved state and goes on as the plain one.
  copy_weights(plain_model, loaded_model);
  auto loaded = streamed_over(loaded_model, o, dir.path().string());
  loaded->load_state(want);
  for (uint64_t s = 4; s < 6; ++s) step_all({{&plain_model, plain.get()}, {&loaded_model, loaded.get()}}, s, o.lr);
  check_same(plain_model, loaded_model);
  CHECK(entries(dir.path()) == 0);
}

TEST_CASE("streamed optimizer: parameters handed with copies live in the file and their copies follow each update",
          "[optim][nvme]") {
  const OptimName name = GENERATE(OptimName::kAdamW, OptimName::kAdafactor);
  const OptimSettings o = settings_of(name);
  const ModelSettings m = test::model_settings(64, 8, 3, 2, 16);
  test::TempDir dir;
  torch::manual_seed(5);
  Gpt plain_model(m), streamed_model(m), loaded_model(m);
  copy_weights(plain_model, streamed_model);
  auto plain = make_optimizer(make_param_groups(*plain_model, o), o);
  const auto copies = bf16_copies(streamed_model);
  int64_t held = 0, matrices = 0, copy_bytes = 0;
  for (const auto& p : streamed_model->parameters()) held += static_cast<int64_t>(p.nbytes());
  for (const auto& [n, c] : copies) matrices += 2 * static_cast<int64_t>(c.nbytes()), copy_bytes += c.nbytes();
  const auto before = streamed_model->named_parameters()["transformer.h.0.mlp.c_fc.weight"].data_ptr();
  auto streamed = streamed_over(streamed_model, o, dir.path().string(), copies);
  // The matrices' values moved to the file: memory keeps the copies in their place.
  CHECK(streamed->filed_parameter_bytes() == matrices);
  CHECK(streamed->resident_parameter_bytes(held) == held - matrices + copy_bytes);
  CHECK(streamed_model->named_parameters()["transformer.h.0.mlp.c_fc.weight"].data_ptr() != before);
  CHECK(entries(dir.path()) == 0);

  auto check_copies = [&] {
    for (const auto& [n, c] : copies) {
      INFO(n);
      CHECK(torch::equal(c, streamed_model->named_parameters()[n].detach().to(torch::kBFloat16)));
    }
  };
  for (uint64_t s = 0; s < 4; ++s) step_all({{&plain_model, plain.get()}, {&streamed_model, streamed.get()}}, s, o.lr);
  check_same(plain_model, streamed_model);  // read through the file's views
  check_copies();

  // Resumed: the weights loaded into the views, the state loaded, and on as the plain run goes.
  copy_weights(plain_model, loaded_model);
  auto loaded = streamed_over(loaded_model, o, dir.path().string(), bf16_copies(loaded_model));
  loaded->load_state(state_of(*plain));
  for (uint64_t s = 4; s < 6; ++s) step_all({{&plain_model, plain.get()}, {&loaded_model, loaded.get()}}, s, o.lr);
  check_same(plain_model, loaded_model);
}

TEST_CASE("offload file: a directory that cannot hold a file is an error naming the key and the fix", "[optim][nvme]") {
  test::TempDir dir;
  test::write_file(dir.file("a-file"), "x");
  try {
    OffloadFile f(dir.file("a-file") + "/below", "parallel.offload_dir");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("parallel.offload_dir: cannot create a file in"));
    CHECK_THAT(e.what(), Catch::Contains("fix:"));
  }
}
