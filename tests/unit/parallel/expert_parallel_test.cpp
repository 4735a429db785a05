// Expert parallelism (parallel/expert_parallel.h) against replicated
// experts: ranks are threads of this process over Gloo on loopback. The
// all-to-all of rows moves exactly what the split sizes say (empty shares
// included) and its backward sends gradients home; a mixture model whose
// experts are split over 2 ranks gives each rank the loss and gradients of
// the replicated model on its own tokens, each expert's gradient being the
// sum of both ranks' for it.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <array>
#include <map>
#include <mutex>

#include "parallel/expert_parallel.h"
#include "test_util.h"
#include "thread_ranks.h"

using namespace gputrain;

namespace {

// Row i of rank r's input is (r, i): where every received row came from is visible.
torch::Tensor tagged_rows(int rank, int64_t n) {
  auto rows = torch::arange(n, torch::kFloat).unsqueeze(1);
  return torch::cat({torch::full({n, 1}, static_cast<float>(rank)), rows}, 1);
}

}  // namespace

TEST_CASE(
    "expert parallel: the all-to-all of rows delivers each share in rank order, and backward sends gradients home",
    "[parallel][moe]") {
  at::set_num_threads(1);
  // send[r][d]: rows rank r sends rank d. The second case leaves rank 1 nothing to receive.
  using Plan = std::array<std::array<int64_t, 2>, 2>;
  const Plan plan = GENERATE(Plan{{{1, 2}, {2, 0}}}, Plan{{{3, 0}, {2, 0}}});
  std::array<torch::Tensor, 2> got, grads;
  test::run_thread_ranks(2, [&](int rank, Communicator& world) {
    const auto& mine = plan[static_cast<size_t>(rank)];
    const std::vector<int64_t> send(mine.begin(), mine.end());
    const std::vector<int64_t> recv = {plan[0][static_cast<size_t>(rank)], plan[1][static_cast<size_t>(rank)]};
    const torch::Tensor x = tagged_rows(rank, send[0] + send[1]).requires_grad_(true);
    const torch::Tensor y = all_to_all_rows(x, send, recv, world);
    // d/dy of |y|^2 / 2 is y; sent home, each row's gradient is the row itself.
    (y * y).sum().div(2).backward();
    got[static_cast<size_t>(rank)] = y.detach();
    grads[static_cast<size_t>(rank)] = x.grad() - x.detach();
  });
  for (int d = 0; d < 2; ++d) {
    CAPTURE(d);
    // Expected at rank d: rank 0's rows for d, then rank 1's, each in its sender's order.
    std::vector<torch::Tensor> expected;
    for (int r = 0; r < 2; ++r) {
      const int64_t before = d == 0 ? 0 : plan[static_cast<size_t>(r)][0];
      expected.push_back(tagged_rows(r, before + plan[static_cast<size_t>(r)][static_cast<size_t>(d)])
                             .narrow(0, before, plan[static_cast<size_t>(r)][static_cast<size_t>(d)]));
    }
    CHECK(torch::equal(got[static_cast<size_t>(d)], torch::cat(expected, 0)));
    CHECK(grads[static_cast<size_t>(d)].abs().max().item<double>() == 0.0);
  }
}

namespace {

std::mutex build_lock;  // the threads share one generator: build under a lock, each from the seed

Gpt make_model(ModelArch arch) {
  std::lock_guard<std::mutex> lock(build_lock);
  torch::manual_seed(11);
  ModelSettings m = test::model_settings(48, 12, 2, 2, 16);
  m.arch = arch;
  m.moe.experts = 4;
  m.moe.top_k = 2;
  m.moe.every = 1;
  m.moe.capacity_factor = 1.0;  // some assignments dropped: each rank's own capacity, as replicated
  return Gpt(m);
}

struct RankResult {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;  // every parameter with a gradient
  std::set<std::string> emptied;
};

RankResult forward_backward(Gpt& model, const torch::Tensor& tokens) {
  model->moe->aux_grad_scale = 0.05;  // the balancing loss reaches the router too
  torch::Tensor loss = model->loss_sum(tokens, tokens.roll(1, 1));
  loss.backward();
  RankResult out;
  out.loss = loss.item<double>();
  for (const auto& p : model->named_parameters())
    if (p.value().grad().defined()) out.grads[p.key()] = p.value().grad().clone();
  return out;
}

}  // namespace

TEST_CASE("expert parallel: experts split over 2 ranks give the replicated model's loss and gradients",
          "[parallel][moe]") {
  at::set_num_threads(1);
  const ModelArch arch = GENERATE(ModelArch::kGpt, ModelArch::kLlama);
  torch::manual_seed(3);
  const std::array<torch::Tensor, 2> tokens = {torch::randint(0, 48, {3, 12}, torch::kLong),
                                               torch::randint(0, 48, {3, 12}, torch::kLong)};
  std::array<RankResult, 2> replicated, split;
  for (int r = 0; r < 2; ++r) {
    Gpt model = make_model(arch);
    replicated[static_cast<size_t>(r)] = forward_backward(model, tokens[static_cast<size_t>(r)]);
  }
  test::run_thread_ranks(2, [&](int rank, Communicator& world) {
    auto ep = test::whole_group(world, "ep");
    Gpt model = make_model(arch);
    const std::set<std::string> emptied = parallelize_experts(model, *ep);
    split[static_cast<size_t>(rank)] = forward_backward(model, tokens[static_cast<size_t>(rank)]);
    split[static_cast<size_t>(rank)].emptied = emptied;
  });
  for (size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(std::abs(split[r].loss - replicated[r].loss) < 1e-5 * std::abs(replicated[r].loss));
    // Rank 0 holds experts 0 and 1 of each layer, rank 1 experts 2 and 3.
    for (const auto& name : split[r].emptied) {
      CHECK(is_expert_parameter(name));
      const bool other = name.find(r == 0 ? ".experts.2." : ".experts.0.") != std::string::npos ||
                         name.find(r == 0 ? ".experts.3." : ".experts.1.") != std::string::npos;
      CHECK(other);
      CHECK(split[r].grads.count(name) == 0);
    }
    size_t per_expert = 0;  // tensors of one expert
    for (const auto& item : replicated[0].grads)
      per_expert += item.first.rfind("transformer.h.0.mlp.experts.0.", 0) == 0;
    CHECK(per_expert >= 2);
    CHECK(split[r].emptied.size() == 2 * 2 * per_expert);  // layers x other rank's experts x tensors
    for (const auto& [name, g] : split[r].grads) {
      INFO(name);
      // An expert's gradient covers both ranks' tokens; everything else is the rank's own.
      const torch::Tensor expected = is_expert_parameter(name)
                                         ? replicated[0].grads.at(name) + replicated[1].grads.at(name)
                                         : replicated[r].grads.at(name);
      CHECK(test::relative_error(g, expected) < 1e-5);
    }
  }
}

TEST_CASE("expert parallel: ep must divide the experts", "[parallel][moe]") {
  std::array<std::string, 2> errors;  // Catch's assertions are not thread-safe: checked after the ranks
  test::run_thread_ranks(2, [&](int rank, Communicator& world) {
    auto ep = test::whole_group(world, "ep");
    std::unique_lock<std::mutex> lock(build_lock);
    torch::manual_seed(1);
    ModelSettings m = test::model_settings(48, 12, 2, 2, 16);
    m.moe.experts = 3;
    m.moe.every = 1;
    Gpt model(m);
    lock.unlock();
    try {
      parallelize_experts(model, *ep);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  for (const auto& e : errors) CHECK_THAT(e, Catch::Contains("parallel.ep (2) must divide model.moe.experts (3)"));
}
