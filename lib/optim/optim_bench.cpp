#include "optim/optim_bench.h"

#include <torch/optim/adamw.h>

#include <cstdio>

#include "model/gpt.h"
#include "optim/make_optimizer.h"
#include "optim/optimizer_specs.h"
#include "precision/precision.h"
#include "util/device.h"
#include "util/timing.h"

namespace gputrain {
namespace {

// describe() is "name, kernel; details": the table wants the kernel.
std::string kernel_of(const Optimizer& opt) {
  const std::string desc = opt.describe();
  const std::string kernel = desc.substr(desc.find(", ") + 2);
  return kernel.substr(0, kernel.find(';'));
}

}  // namespace

OptimBenchResult bench_optimizers(const Settings& s, int64_t steps) {
  OptimBenchResult r;
  r.threads = resolve_threads(s.run.threads);
  at::set_num_threads(static_cast<int>(r.threads));
  const torch::Device device = resolve_device(s.run.device);
  r.device = device_name(device);
  const Precision precision(s.precision, device);
  torch::manual_seed(static_cast<uint64_t>(s.run.seed));
  Gpt model(s.model);
  model->to(device, precision.weight_dtype());
  r.parameters = model->parameter_count();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.mutable_grad() = at::randn_like(p) * 1e-2;
  }
  const double lr = 1e-5;  // small: the weights barely move across configurations
  // Each optimizer's kernels (optim/optimizer_spec.h), and its settings variants where it has some.
  for (const OptimizerSpec* spec : optimizer_specs()) {
    std::vector<OptimImpl> impls;
    if (spec->foreach) impls.push_back(OptimImpl::kForeach);
    if (spec->fused) impls.push_back(OptimImpl::kFused);
    auto variants = spec->bench_variants;
    if (variants.empty()) variants.push_back({"", [](OptimSettings&) {}});
    for (OptimImpl impl : impls)
      for (const auto& [label, vary] : variants) {
        OptimSettings o = s.optim;
        o.name = spec->name;
        o.impl = impl;
        vary(o);
        auto opt = make_optimizer(*model, o);
        const double ms = mean_ms(device, steps, [&] { opt->step(lr); });
        r.rows.push_back({optim_name(spec->name), kernel_of(*opt) + label,
                          static_cast<double>(opt->state_bytes()) / static_cast<double>(r.parameters), ms});
      }
  }
  if (precision.weight_dtype() == at::kFloat) {
    // bf16 mixed precision's weight copies (train/weight_copies.h): the same fused pass also
    // writes a bf16 copy of every matrix, 2 more bytes per parameter written.
    OptimSettings o = s.optim;
    o.name = OptimName::kAdamW;
    o.impl = OptimImpl::kFused;
    auto opt = make_optimizer(*model, o);
    if (opt->writes_bf16_copies()) {
      torch::NoGradGuard no_grad;
      for (const auto& p : model->parameters())
        if (p.dim() == 2) opt->set_bf16_copy(p, p.detach().to(at::kBFloat16));
      const double ms = mean_ms(device, steps, [&] { opt->step(lr); });
      r.rows.push_back({"adamw", kernel_of(*opt) + " + bf16 weight copies",
                        static_cast<double>(opt->state_bytes()) / static_cast<double>(r.parameters), ms});
    }
  }
  if (precision.weight_dtype() == at::kFloat) {  // LibTorch's AdamW keeps moments in the parameters' dtype
    torch::optim::AdamW ref(model->parameters(), torch::optim::AdamWOptions(lr)
                                                     .betas({s.optim.betas[0], s.optim.betas[1]})
                                                     .eps(s.optim.eps)
                                                     .weight_decay(s.optim.weight_decay));
    const double ms = mean_ms(device, steps, [&] { ref.step(); });
    int64_t bytes = 0;
    for (const auto& [key, state] : ref.state()) {
      const auto& st = static_cast<const torch::optim::AdamWParamState&>(*state);
      bytes += static_cast<int64_t>(st.exp_avg().nbytes() + st.exp_avg_sq().nbytes() + 8);
    }
    r.rows.push_back({"torch::optim::AdamW", "LibTorch C++ (a loop of ops per tensor)",
                      static_cast<double>(bytes) / static_cast<double>(r.parameters), ms});
  }
  return r;
}

std::string optim_bench_table(const OptimBenchResult& r) {
  std::string out = "| optimizer | update kernel | state bytes / parameter | step ms |\n|---|---|---:|---:|\n";
  for (const auto& row : r.rows) {
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %s | %.2f | %.1f |\n", row.optimizer.c_str(), row.kernel.c_str(),
                  row.state_bytes_per_param, row.step_ms);
    out += line;
  }
  return out;
}

}  // namespace gputrain
