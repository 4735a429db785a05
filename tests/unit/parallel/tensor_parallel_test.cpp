// Tensor parallelism against one process: two ranks (threads of this process,
// over Gloo on loopback) each build the same GPT, keep their shard, and run
// forward and backward on the same tokens. The loss must equal the
// single-process loss, and the gradients put back together (unshard) must
// equal the single-process gradients, up to the order of the sums in the
// row-parallel layers (fp32: relative 1e-5).
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <mutex>

#include "parallel/tensor_parallel.h"
#include "test_util.h"
#include "thread_ranks.h"

using namespace gputrain;

namespace {

struct Result {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;  // this rank's shards
  std::vector<TensorShard> shards;
};

// The ranks are threads sharing one global generator: building under a lock
// gives each the same weights, as separate processes with one seed get.
std::mutex build_lock;
// GPT-2, or Llama with 4 query heads sharing 2 key/value heads (each rank: 2 and 1) and SwiGLU.
Gpt make_model(ModelArch arch) {
  std::lock_guard<std::mutex> lock(build_lock);
  torch::manual_seed(7);
  ModelSettings m = test::model_settings(64, 16, 2, 4, 32);
  if (arch == ModelArch::kLlama) {
    m.arch = arch;
    m.n_kv_head = 2;
    m.bias = true;  // biases split with their rows too
  }
  return Gpt(m);
}

Result run_rank(Communicator& world, ModelArch arch, const torch::Tensor& tokens, const torch::Tensor& targets) {
  auto tp = test::whole_group(world, "tp");
  Gpt model = make_model(arch);
  Result out;
  out.shards = parallelize_tensor(model, *tp);
  auto loss = model->loss_sum(tokens, targets);
  loss.backward();
  out.loss = loss.item<double>();
  for (const auto& p : model->named_parameters()) out.grads[p.key()] = p.value().grad().clone();
  return out;
}

}  // namespace

TEST_CASE("tensor parallel: two ranks give one process's loss and gradients", "[parallel]") {
  at::set_num_threads(1);
  torch::manual_seed(1);
  const auto tokens = torch::randint(0, 64, {3, 16}, torch::kLong),
             targets = torch::randint(0, 64, {3, 16}, torch::kLong);
  const ModelArch arch = GENERATE(ModelArch::kGpt, ModelArch::kLlama);
  CAPTURE(static_cast<int>(arch));
  Gpt whole = make_model(arch);
  auto ref_loss = whole->loss_sum(tokens, targets);
  ref_loss.backward();

  Result r0, r1;
  test::run_thread_ranks(
      2, [&](int rank, Communicator& world) { (rank == 0 ? r0 : r1) = run_rank(world, arch, tokens, targets); });

  CHECK(r0.loss == Approx(ref_loss.item<double>()).epsilon(1e-5));
  CHECK(r1.loss == Approx(r0.loss).epsilon(1e-6));
  int sharded = 0;
  for (const auto& s : r0.shards) {
    INFO(s.name);
    const torch::Tensor ref = whole->named_parameters()[s.name].grad();
    const torch::Tensor got = unshard({r0.grads[s.name], r1.grads[s.name]}, s);
    REQUIRE(got.sizes() == ref.sizes());
    CHECK(test::relative_error(got, ref) < 1e-5);
    if (s.dim >= 0) {
      ++sharded;
      CHECK(r0.grads[s.name].numel() * 2 == ref.numel());  // each rank holds half
    } else {
      CHECK(test::relative_error(r1.grads[s.name], r0.grads[s.name]) < 1e-6);  // replicated: the same on both ranks
    }
  }
  CHECK(sharded == 2 * 6);  // per block: c_attn w+b, c_fc w+b, attn.c_proj w, mlp.c_proj w
}

TEST_CASE("tensor parallel: shard_of and unshard are inverses, q k v split per section", "[parallel]") {
  const auto w = torch::arange(24, torch::kFloat).reshape({6, 4});
  const TensorShard qkv{"w", 0, {1, 1, 1}};
  // Sections of 2 rows (q, k, v); rank 0 holds the first row of each.
  CHECK(torch::equal(shard_of(w, qkv, 0, 2), torch::cat({w[0].unsqueeze(0), w[2].unsqueeze(0), w[4].unsqueeze(0)})));
  CHECK(torch::equal(unshard({shard_of(w, qkv, 0, 2), shard_of(w, qkv, 1, 2)}, qkv), w));
  const TensorShard cols{"w", 1};
  CHECK(torch::equal(unshard({shard_of(w, cols, 0, 2), shard_of(w, cols, 1, 2)}, cols), w));
  CHECK(torch::equal(shard_of(w, TensorShard{"w", -1}, 1, 2), w));
  // Grouped-query attention: q has 4 rows, k and v 2 each (relative sizes 2:1:1); 2 ranks.
  const auto g = torch::arange(16, torch::kFloat).reshape({8, 2});
  const TensorShard gqa{"g", 0, {2, 1, 1}};
  CHECK(torch::equal(shard_of(g, gqa, 1, 2), torch::cat({g.narrow(0, 2, 2), g.narrow(0, 5, 1), g.narrow(0, 7, 1)})));
  CHECK(torch::equal(unshard({shard_of(g, gqa, 0, 2), shard_of(g, gqa, 1, 2)}, gqa), g));
}
