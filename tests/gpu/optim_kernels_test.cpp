// The fused CUDA optimizer kernels against their CPU references (the C++
// loops in fused_update_cpu.cpp), and every optimizer on CUDA against the
// same optimizer on the CPU.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include "optim/make_optimizer.h"
#include "test_util.h"

using namespace gputrain;

namespace {

// Tensors around the kernels' edges: tiny, one partial 8-bit block, several
// AdamW chunks (16384 elements) with a ragged tail, many quantization blocks.
const std::vector<std::vector<int64_t>> kShapes = {{3}, {300}, {5000}, {129, 257}, {40000}, {64, 1024}};

struct Run {
  std::vector<at::Tensor> params;
  std::unique_ptr<Optimizer> opt;
};

Run make_run(const OptimSettings& o, at::Device device, at::ScalarType dtype) {
  at::manual_seed(1);
  Run r;
  ParamGroup decay{"decay", {}, {}, 0.1, 1.0}, no_decay{"no_decay", {}, {}, 0.0, 0.5};
  for (size_t i = 0; i < kShapes.size(); ++i) {
    r.params.push_back(at::randn(kShapes[i]).to(dtype).to(device));
    ParamGroup& g = kShapes[i].size() >= 2 ? decay : no_decay;
    g.names.push_back(std::string("p").append(std::to_string(i)));
    g.params.push_back(r.params.back());
  }
  r.opt = make_optimizer({decay, no_decay}, o);
  return r;
}

void steps(Run& r, int n) {
  for (int s = 0; s < n; ++s) {
    at::manual_seed(50 + s);
    for (auto& p : r.params) p.mutable_grad() = at::randn(p.sizes()).to(p.scalar_type()).to(p.device());
    // Odd steps fold a clipping coefficient into the update (fused AdamW), on the CPU as on the GPU.
    if (r.opt->folds_grad_scale())
      r.opt->set_grad_scale(s % 2 ? at::full({}, 0.37f, at::TensorOptions().device(r.params.front().device()))
                                  : at::Tensor());
    r.opt->step(1e-2);
    r.opt->zero_grad();
  }
}

}  // namespace

TEST_CASE("gpu: fused AdamW and 8-bit AdamW kernels match the CPU references", "[gpu][optim]") {
  for (OptimName name : {OptimName::kAdamW, OptimName::kAdamW8bit}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      OptimSettings o;
      o.name = name;
      o.impl = OptimImpl::kFused;
      Run cpu = make_run(o, at::kCPU, dtype), gpu = make_run(o, at::kCUDA, dtype);
      INFO(gpu.opt->describe() << " " << dtype);
      REQUIRE_THAT(gpu.opt->describe(), Catch::Contains("CUDA kernel"));
      steps(cpu, 5);
      steps(gpu, 5);
      for (size_t i = 0; i < cpu.params.size(); ++i) {
        const at::Tensor a = cpu.params[i].to(at::kFloat), b = gpu.params[i].cpu().to(at::kFloat);
        INFO("tensor " << i);
        if (dtype == at::kFloat) {
          // The same formula; only FMA contraction and sqrt rounding may differ.
          CHECK(at::allclose(a, b, 1e-5, 1e-6));
        } else {
          // Same rounding bits; an fp32 result 1 ulp apart can round to the neighbouring bf16.
          const double ulp = 1.0 / 128;
          CHECK(((a - b).abs() <= a.abs() * ulp + 1e-6).all().item<bool>());
          CHECK((a == b).to(at::kFloat).mean().item<double>() > 0.99);
        }
      }
      for (size_t k = 0; k < cpu.opt->state().size(); ++k) {
        const auto& sa = cpu.opt->state()[k];
        const at::Tensor sb = gpu.opt->state()[k].tensor.cpu();
        INFO(sa.name);
        if (sa.tensor.scalar_type() == at::kByte)  // codes: a value on a decision boundary may flip
          CHECK((sa.tensor == sb).to(at::kFloat).mean().item<double>() > 0.999);
        else if (dtype == at::kFloat) CHECK(at::allclose(sa.tensor.to(at::kDouble), sb.to(at::kDouble), 1e-4, 1e-7));
      }
    }
  }
}

TEST_CASE("gpu: every optimizer on CUDA matches itself on the CPU", "[gpu][optim]") {
  for (OptimName name : {OptimName::kAdamW, OptimName::kAdafactor, OptimName::kLion, OptimName::kSgd}) {
    OptimSettings o;
    o.name = name;
    o.impl = OptimImpl::kForeach;
    o.adafactor.beta1 = 0.9;
    Run cpu = make_run(o, at::kCPU, at::kFloat), gpu = make_run(o, at::kCUDA, at::kFloat);
    steps(cpu, 4);
    steps(gpu, 4);
    INFO(gpu.opt->describe());
    for (size_t i = 0; i < cpu.params.size(); ++i) CHECK(at::allclose(cpu.params[i], gpu.params[i].cpu(), 1e-4, 1e-5));
  }
}

// On a GPU the working sets are as large as the largest tensor and the copies
// in and out of them are multi-tensor kernels (optim/optimizer.h).
TEST_CASE("gpu: foreach optimizers update bf16 parameters in working sets, stochastically rounded", "[gpu][optim]") {
  CHECK(test::bf16_working_set_mismatch(torch::kCUDA) == "");
}

// bf16 mixed precision's weight copies (train/weight_copies.h): the kernel
// writes each updated fp32 parameter rounded to nearest, as ATen's .to(bf16)
// (autocast's cast) rounds it, and the CPU loop writes the same.
TEST_CASE("gpu: fused AdamW writes bf16 copies equal to the updated weights rounded to nearest", "[gpu][optim]") {
  OptimSettings o;
  o.impl = OptimImpl::kFused;
  Run cpu = make_run(o, at::kCPU, at::kFloat), gpu = make_run(o, at::kCUDA, at::kFloat);
  std::vector<at::Tensor> cpu_copies, gpu_copies;
  for (size_t i = 0; i < gpu.params.size(); ++i) {
    cpu_copies.push_back(at::zeros(kShapes[i], at::kBFloat16));
    gpu_copies.push_back(at::zeros(kShapes[i], at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA)));
    cpu.opt->set_bf16_copy(cpu.params[i], cpu_copies.back());
    gpu.opt->set_bf16_copy(gpu.params[i], gpu_copies.back());
  }
  steps(cpu, 3);
  steps(gpu, 3);
  for (size_t i = 0; i < gpu.params.size(); ++i) {
    INFO("tensor " << i);
    CHECK(at::equal(gpu_copies[i].cpu(), gpu.params[i].to(at::kBFloat16).cpu()));
    CHECK(at::equal(cpu_copies[i], cpu.params[i].to(at::kBFloat16)));
    // The fp32 updates agree to an ulp or so (FMA contraction), so their roundings almost always do.
    CHECK((cpu_copies[i] == gpu_copies[i].cpu()).to(at::kFloat).mean().item<double>() > 0.99);
  }
}
