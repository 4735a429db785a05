// Muon on CUDA: the batched Newton-Schulz iteration (bmm over same-shaped matrices, in bf16 by
// default) and whole steps against the same on the CPU, and the owners' pipelined path
// (optim/matrix_owners.h) with CUDA tensors. The NCCL all-to-alls between ranks need two GPUs.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include "optim/muon.h"
#include "test_util.h"

using namespace gputrain;

TEST_CASE("gpu: Muon's batched iteration on CUDA matches the CPU's", "[gpu][optim][muon]") {
  at::manual_seed(3);
  MuonSettings o;
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{768, 2304}, std::vector<int64_t>{3072, 768}}) {
    std::vector<at::Tensor> cpu, gpu;
    for (int i = 0; i < 4; ++i) {
      cpu.push_back(at::randn(shape));
      gpu.push_back(cpu.back().cuda());
    }
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      INFO(shape[0] << " x " << shape[1] << (dtype == at::kFloat ? " fp32" : " bf16"));
      const at::Tensor a = orthogonalize(cpu, o, dtype).to(at::kFloat),
                       b = orthogonalize(gpu, o, dtype).cpu().to(at::kFloat);
      // fp32 GEMMs differ in summation order only (TF32 is off by default). In bf16 one flipped
      // rounding of an input moves the result by up to ~4% of its largest value (measured on the CPU
      // with inputs 1e-6 apart); a wrong coefficient or step moves it by the whole.
      const double scale = a.abs().max().item<double>();
      CHECK((a - b).abs().max().item<double>() < (dtype == at::kFloat ? 1e-4 : 0.1) * scale);
      const at::Tensor sv = at::linalg_svdvals(b[0]);
      CHECK(sv.min().item<double>() > 0.6);
      CHECK(sv.max().item<double>() < 1.25);
    }
  }
}

TEST_CASE("gpu: Muon steps on CUDA as on the CPU, with its AdamW part", "[gpu][optim][muon]") {
  for (const MuonIterationDtype ns : {MuonIterationDtype::kFp32, MuonIterationDtype::kBf16}) {
    OptimSettings o;
    o.name = OptimName::kMuon;
    o.muon.ns_dtype = ns;
    std::vector<std::vector<at::Tensor>> params(2);
    std::vector<std::unique_ptr<Optimizer>> opt;
    const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
        {"transformer.h.0.attn.c_attn.weight", {192, 64}},
        {"transformer.h.1.attn.c_attn.weight", {192, 64}},  // batched with the one above
        {"transformer.h.0.mlp.c_fc.weight", {256, 64}},
        {"transformer.h.0.ln_1.weight", {64}},   // AdamW's
        {"transformer.wte.weight", {100, 64}}};  // AdamW's
    for (int d = 0; d < 2; ++d) {
      at::manual_seed(1);
      ParamGroup g;
      g.weight_decay = 0.1;
      for (const auto& [name, shape] : shapes) {
        params[d].push_back(at::randn(shape).to(d ? at::kCUDA : at::kCPU).set_requires_grad(true));
        g.names.push_back(name);
        g.params.push_back(params[d].back());
      }
      opt.push_back(std::make_unique<Muon>(std::vector<ParamGroup>{g}, o, UpdateKernel::kForeach));
    }
    for (int step = 0; step < 4; ++step) {
      at::manual_seed(50 + step);
      for (size_t i = 0; i < shapes.size(); ++i) {
        const at::Tensor grad = at::randn(shapes[i].second);
        params[0][i].mutable_grad() = grad;
        params[1][i].mutable_grad() = grad.cuda();
      }
      for (auto& m : opt) m->step(0.02);
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      INFO(shapes[i].first << (ns == MuonIterationDtype::kFp32 ? " fp32" : " bf16") << " iteration");
      // Each step moves an element by up to ~0.01 (lr 0.02 x sqrt(3) x the iteration's largest
      // values): fp32 agrees to float noise, bf16's flipped roundings to a part of one step.
      CHECK((params[0][i] - params[1][i].cpu()).abs().max().item<double>() <
            (ns == MuonIterationDtype::kFp32 ? 1e-5 : 1e-2));
    }
  }
}

TEST_CASE("gpu: Muon's pipelined owner path on CUDA tensors equals its step on whole matrices", "[gpu][optim][muon]") {
  CHECK(test::muon_pipelined_mismatch(torch::kCUDA) == "");
}
