// kernels.cuda_graphs (train/step_graph.h) on the GPU: a replayed step gives
// the eager step's loss and gradients as weights, data and masks change, with
// dropout and gradient accumulation, and with activation checkpointing
// (without dropout); evaluation runs in the graph's memory pool; through the
// CLI a graphed run follows an eager one, in bf16 and under fp16 loss scaling
// with skipped steps.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <cmath>

#include "data/loader.h"
#include "model/activation_checkpointing.h"
#include "precision/precision.h"
#include "test_util.h"
#include "train/step_graph.h"
#include "util/document_layout.h"
#include "train/train_step.h"

using namespace gputrain;
using namespace gputrain::test;

namespace {

struct StepRecord {
  double loss = 0;
  std::vector<torch::Tensor> grads;  // on the CPU
};

// The micro-batches of step `s`: fresh tokens, and a mask that grows with s,
// so both the data and the normalizer change from step to step. With `documents`, each row is
// packed documents of lengths that change from step to step too.
std::vector<Batch> batches_for(int64_t s, const ModelSettings& m, const torch::Device& device, bool documents = false) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + s);
  std::vector<Batch> micro;
  for (int i = 0; i < 2; ++i) {
    auto input = at::randint(0, m.vocab_size, {4, m.seq_len}, gen, torch::kLong);
    auto target = at::randint(0, m.vocab_size, {4, m.seq_len}, gen, torch::kLong);
    if (i == 0) target.slice(1, 0, 3 * s) = kIgnoreIndex;
    const int64_t count = (target != kIgnoreIndex).sum().item<int64_t>();
    micro.push_back(Batch{input.to(device), target.to(device), count});
    if (documents) {
      torch::Tensor positions = at::empty({4, m.seq_len}, torch::kLong);
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t t = 0, start = 0; t < m.seq_len; ++t) {
          if (t > 0 && (t * (s + r + 2)) % 23 < s + r + 2) start = t;  // starts that differ by row and step
          positions[r][t] = t - start;
        }
      micro.back().token_layout = document_layout(positions).to(device);
    }
  }
  return micro;
}

// Model `m` on `device` in training mode, from seed 1: the same weights for every run a case compares.
Gpt seeded_model(const ModelSettings& m, const torch::Device& device) {
  torch::manual_seed(1);
  Gpt model(m);
  model->to(device);
  model->train();
  return model;
}

// `steps` steps of 2 micro-batches, each followed by an SGD update so the
// weights change between replays; through `graph` when given.
std::vector<StepRecord> train(Gpt& model, const Precision& precision, StepGraph* graph, int64_t steps,
                              const torch::Device& device, bool documents = false) {
  std::vector<torch::Tensor> params = model->parameters();
  std::vector<StepRecord> out;
  torch::manual_seed(7);  // dropout's stream, the same for both runs
  for (int64_t s = 0; s < steps; ++s) {
    const auto micro = batches_for(s, model->cfg, device, documents);
    torch::Tensor loss =
        graph ? graph->accumulate(model, micro, precision, 0) : accumulate_gradients(model, micro, &precision);
    StepRecord r;
    r.loss = loss.item<double>();
    torch::NoGradGuard no_grad;
    for (auto& p : params) {
      r.grads.push_back(p.grad().to(torch::kCPU, torch::kFloat));
      p.sub_(p.grad(), 0.05);
    }
    out.push_back(std::move(r));
    if (!graph || !graph->keeps_gradients())
      for (auto& p : params) p.mutable_grad() = torch::Tensor();
  }
  return out;
}

}  // namespace

TEST_CASE("gpu: a captured step graph replays the eager step's loss and gradients", "[gpu]") {
  const torch::Device cuda(torch::kCUDA, 0);
  ModelSettings m = model_settings(256, 64, 2, 4, 64);
  m.dropout = 0.1;
  m.attention = AttentionImpl::kMath;  // no atomics in attention's backward: eager and graph should agree closely
  PrecisionSettings ps;
  ps.mode = PrecisionMode::kBf16;
  Precision precision(ps, cuda);
  auto build = [&] { return seeded_model(m, cuda); };
  constexpr int64_t kSteps = 9;
  Gpt eager_model = build();
  const auto eager = train(eager_model, precision, nullptr, kSteps, cuda);
  Gpt graph_model = build();
  auto graph = make_step_graph(cuda, graph_model->parameters());
  const auto graphed = train(graph_model, precision, graph.get(), kSteps, cuda);

  const auto report = graph->report();
  CHECK(report["captured"].get<bool>());
  CHECK(report["warmup_steps"].get<int64_t>() == StepGraph::kWarmupSteps);
  CHECK(report["replayed_steps"].get<int64_t>() == kSteps - StepGraph::kWarmupSteps);
  double loss_diff = 0, grad_diff = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    INFO("step " << s + 1);
    loss_diff = std::max(loss_diff, std::abs(eager[s].loss - graphed[s].loss));
    CHECK(graphed[s].loss == Approx(eager[s].loss).epsilon(1e-4));
    for (size_t i = 0; i < eager[s].grads.size(); ++i) {
      const double scale = eager[s].grads[i].abs().max().item<double>() + 1e-12;
      const double d = (graphed[s].grads[i] - eager[s].grads[i]).abs().max().item<double>() / scale;
      grad_diff = std::max(grad_diff, d);
      CHECK(d < 1e-3);  // a stale batch, mask or dropout stream differs by far more
    }
  }
  // Replays saw new data: the losses move from step to step.
  CHECK(graphed[kSteps - 1].loss != graphed[kSteps - 2].loss);
  WARN("graph vs eager, bf16, dropout 0.1, 2 micro-batches: max |loss difference| "
       << loss_diff << ", max gradient difference relative to the largest gradient " << grad_diff);

  // Evaluation in the graph's memory: the same loss as outside it, served from the pool's
  // blocks that are free between replays where outside it needs new memory (each measured
  // after emptying the allocator's cache). Then the next replay still gives the eager step.
  const auto eval_batches = batches_for(20, m, cuda);
  const auto reserved = [] { return c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].current; };
  c10::cuda::CUDACachingAllocator::emptyCache();
  int64_t before = reserved();
  double inside = 0;
  graph->run_in_graph_memory([&] { inside = evaluate(graph_model, eval_batches, &precision); });
  const int64_t grown_inside = reserved() - before;
  c10::cuda::CUDACachingAllocator::emptyCache();
  before = reserved();
  const double outside = evaluate(graph_model, eval_batches, &precision);
  const int64_t grown_outside = reserved() - before;
  WARN("evaluation's new reserved memory: " << grown_inside << " bytes in the graph's pool, " << grown_outside
                                            << " bytes outside it");
  CHECK(inside == Approx(outside).epsilon(1e-5));
  CHECK(grown_inside < grown_outside);
  const auto next = batches_for(kSteps, m, cuda);
  torch::manual_seed(11);
  const double eager_next = accumulate_gradients(eager_model, next, &precision).item<double>();
  torch::manual_seed(11);
  const double graph_next = graph->accumulate(graph_model, next, precision, 0).item<double>();
  CHECK(graph_next == Approx(eager_next).epsilon(1e-4));

  // The capture fixed the shapes: another micro-batch count is an error.
  auto three = batches_for(0, m, cuda);
  three.push_back(three.front());
  CHECK_THROWS_WITH(graph->accumulate(graph_model, three, precision, 0), Catch::Contains("captured with 2"));
}

TEST_CASE("gpu: a captured step graph replays packed documents' steps, whose layout changes", "[gpu]") {
  // Eager steps run variable-length flash attention; the graph, which cannot, the block mask built
  // from the static positions (model/attention.h): the same numbers within bf16 kernels' rounding.
  const torch::Device cuda(torch::kCUDA, 0);
  ModelSettings m = model_settings(256, 64, 2, 4, 64);
  m.arch = ModelArch::kLlama;
  PrecisionSettings ps;
  ps.mode = PrecisionMode::kBf16;
  Precision precision(ps, cuda);
  auto build = [&] { return seeded_model(m, cuda); };
  constexpr int64_t kSteps = 7;
  Gpt eager_model = build();
  const auto eager = train(eager_model, precision, nullptr, kSteps, cuda, true);
  Gpt graph_model = build();
  auto graph = make_step_graph(cuda, graph_model->parameters());
  const auto graphed = train(graph_model, precision, graph.get(), kSteps, cuda, true);
  CHECK(graph->report()["captured"].get<bool>());
  for (int64_t s = 0; s < kSteps; ++s) {
    INFO("step " << s + 1);
    CHECK(graphed[s].loss == Approx(eager[s].loss).epsilon(5e-3));
    for (size_t i = 0; i < eager[s].grads.size(); ++i) {
      const double scale = eager[s].grads[i].abs().max().item<double>() + 1e-12;
      CHECK((graphed[s].grads[i] - eager[s].grads[i]).abs().max().item<double>() / scale < 5e-2);
    }
  }
  // Without the documents the same tokens give other losses: the replays did read the layout.
  Gpt plain_model = build();
  const auto plain = train(plain_model, precision, nullptr, 1, cuda, false);
  CHECK(std::abs(plain[0].loss - eager[0].loss) > 1e-3);
}

TEST_CASE("gpu: a captured step graph holds activation checkpointing's recomputation (no dropout)", "[gpu]") {
  const torch::Device cuda(torch::kCUDA, 0);
  ModelSettings m = model_settings(256, 64, 2, 4, 64);  // dropout 0: the recomputation needs no random state
  m.attention = AttentionImpl::kMath;
  PrecisionSettings ps;
  ps.mode = PrecisionMode::kBf16;
  Precision precision(ps, cuda);
  auto build = [&](CheckpointingPolicy policy) {
    Gpt model = seeded_model(m, cuda);
    apply_activation_checkpointing(model, policy, 1);
    return model;
  };
  constexpr int64_t kSteps = 7;
  Gpt plain_model = build(CheckpointingPolicy::kNone);
  const auto plain = train(plain_model, precision, nullptr, kSteps, cuda);
  Gpt graph_model = build(CheckpointingPolicy::kFull);
  auto graph = make_step_graph(cuda, graph_model->parameters());
  const auto graphed = train(graph_model, precision, graph.get(), kSteps, cuda);
  CHECK(graph->report()["replayed_steps"].get<int64_t>() == kSteps - StepGraph::kWarmupSteps);
  for (int64_t s = 0; s < kSteps; ++s) {
    INFO("step " << s + 1);
    CHECK(graphed[s].loss == Approx(plain[s].loss).epsilon(1e-4));
    for (size_t i = 0; i < plain[s].grads.size(); ++i) {
      const double scale = plain[s].grads[i].abs().max().item<double>() + 1e-12;
      CHECK((graphed[s].grads[i] - plain[s].grads[i]).abs().max().item<double>() / scale < 1e-3);
    }
  }
}

namespace {

std::vector<nlohmann::json> run_cli(TempDir& dir, const std::string& name, std::vector<std::string> extra,
                                    std::string* output = nullptr) {
  std::vector<std::string> args = {"run",   "--output-dir",     dir.file(name), "--set", "metrics.progress=off",
                                   "--set", "train.log_every=1"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_gputrain(args);
  INFO(name << "\n" << r.output);
  REQUIRE(r.exit_code == 0);
  if (output) *output = r.output;
  return read_jsonl(dir.file(name) + "/metrics.jsonl");
}

}  // namespace

TEST_CASE("gpu: a run with kernels.cuda_graphs follows the eager run (bf16, accumulation, dropout, eval)", "[gpu]") {
  TempDir dir;
  const std::vector<std::string> common = {"--set", "train.max_steps=120",      "--set", "precision.mode=bf16",
                                           "--set", "train.grad_accum_steps=2", "--set", "model.dropout=0.1",
                                           "--set", "train.eval_every=40"};
  const auto eager = run_cli(dir, "eager", common);
  std::vector<std::string> graphs = common;
  graphs.insert(graphs.end(), {"--set", "kernels.cuda_graphs=true"});
  std::string output;
  const auto graphed = run_cli(dir, "graphs", graphs, &output);
  CHECK_THAT(output, Catch::Contains("kernels.cuda_graphs: step 4 captured (2 micro-batches)"));
  REQUIRE(eager.size() == graphed.size());
  double diff = 0;
  for (size_t i = 0; i < eager.size(); ++i)
    diff = std::max(diff, std::abs(eager[i]["loss"].get<double>() - graphed[i]["loss"].get<double>()));
  WARN("CLI, bf16: max per-step |loss difference|, graphs vs eager, over 120 steps: " << diff);
  CHECK(diff < 1e-2);  // flash attention's backward differs run to run; a broken replay differs at once by more
  // The replays learn: 3.50 -> 3.05 nats on the H100 (2026-11-25), 120 steps of which 50 warm up the lr.
  CHECK(graphed.back()["loss"].get<double>() < graphed.front()["loss"].get<double>() - 0.3);
  const auto s = read_json(dir.file("graphs") + "/summary.json");
  CHECK(s["cuda_graphs"]["captured"].get<bool>());
  CHECK(s["cuda_graphs"]["replayed_steps"].get<int64_t>() == 120 - StepGraph::kWarmupSteps);
  CHECK(s["eval_loss"].get<double>() ==
        Approx(read_json(dir.file("eager") + "/summary.json")["eval_loss"].get<double>()).margin(2e-2));
}

TEST_CASE("gpu: kernels.cuda_graphs under fp16 loss scaling skips and rescales as the eager run does", "[gpu]") {
  TempDir dir;
  // A scale that grows every 2 clean steps keeps overflowing through the run, replays included.
  // The built-in quickstart warms the lr up over 50 steps: fewer here, to fit 40 steps.
  const std::vector<std::string> common = {
      "--set", "train.max_steps=40",           "--set", "optim.schedule.warmup_steps=5",
      "--set", "precision.mode=fp16",          "--set", "precision.growth_interval=2",
      "--set", "precision.init_scale=1048576", "--set", "train.grad_accum_steps=2",
      "--set", "model.attention=math"};
  const auto eager = run_cli(dir, "eager", common);
  std::vector<std::string> graphs = common;
  graphs.insert(graphs.end(), {"--set", "kernels.cuda_graphs=true"});
  const auto graphed = run_cli(dir, "graphs", graphs);
  REQUIRE(eager.size() == graphed.size());
  int64_t changes_after_capture = 0;
  for (size_t i = 0; i < eager.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(graphed[i]["loss_scale"].get<double>() == eager[i]["loss_scale"].get<double>());
    CHECK(graphed[i]["skipped_steps"].get<int64_t>() == eager[i]["skipped_steps"].get<int64_t>());
    if (i > 4 && graphed[i]["skipped_steps"] != graphed[i - 1]["skipped_steps"]) ++changes_after_capture;
  }
  CHECK(changes_after_capture > 0);  // the replayed steps met the scaler's skip path
  CHECK(graphed.back()["loss"].get<double>() == Approx(eager.back()["loss"].get<double>()).margin(1e-2));
}

TEST_CASE("gpu: kernels.cuda_graphs under a launcher's world of one trains as a single process", "[gpu]") {
  TempDir dir;
  std::string output;
  run_cli(dir, "launched",
          {"--nproc-per-node", "1", "--set", "train.max_steps=10", "--set", "optim.schedule.warmup_steps=2", "--set",
           "kernels.cuda_graphs=true"},
          &output);
  CHECK_THAT(output, Catch::Contains("trains as a single process, without a process group"));
  const auto s = read_json(dir.file("launched") + "/summary.json");
  CHECK(s["cuda_graphs"]["captured"].get<bool>());
  CHECK(s["cuda_graphs"]["replayed_steps"].get<int64_t>() == 10 - StepGraph::kWarmupSteps);
}
