#include "train/batch_finder.h"

#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <algorithm>

#include "planning/memory_plan.h"
#include "planning/rank_memory_plan.h"
#include "util/device.h"
#include "util/error.h"

namespace gputrain {

BatchChoice find_batch_size(int64_t global, const std::function<bool(int64_t)>& fits) {
  BatchChoice c;
  auto attempt = [&](int64_t b) {
    const bool ok = fits(b);
    c.tried.emplace_back(b, ok);
    return ok;
  };
  int64_t best = 0, limit = global + 1;  // limit: the smallest size known not to fit
  for (int64_t b = 1; b <= global && global % b == 0; b *= 2) {
    if (!attempt(b)) {
      limit = b;
      break;
    }
    best = b;
  }
  if (best == 0)
    throw runtime_error(
        "train.per_device_batch_size: auto: not even a micro-batch of 1 sequence fits"
        "\n    fix: set train.gradient_checkpointing: full, precision.mode: bf16, or a smaller "
        "model.seq_len or model");
  // Multiples of 8 above the largest power of two, largest first.
  for (int64_t b = (limit - 1) / 8 * 8; b > best; b -= 8)
    if (global % b == 0 && attempt(b)) {
      best = b;
      break;
    }
  c.batch = best;
  c.grad_accum = global / best;
  return c;
}

std::string BatchChoice::describe() const {
  std::string s = "per_device_batch_size: auto -> " + std::to_string(batch) + " (grad_accum_steps " +
                  std::to_string(grad_accum) + "); tried";
  for (const auto& [b, ok] : tried) s.append(" ").append(std::to_string(b)).append(ok ? " ok" : " no");
  return s;
}

double rank_step_bytes(const Settings& s, const Grid& g, int64_t batch) {
  const MemoryPlan p = plan_memory(s, batch);
  if (s.parallel.zero == 0 || g.replicas() < 2) return p.total();
  if (s.parallel.zero < 3) {
    // Whole weights, and every gradient until its bucket is reduced; the optimizer state of the
    // rank owning the most (whole parameters go to owners, so shares differ).
    double state = 0;
    for (const RankHoldings& r : plan_rank_memory(s, g)) state = std::max(state, r.largest_optimizer);
    return p.total() - p.optimizer + state;
  }
  double held = 0;  // the fullest pipeline stage's
  for (const RankHoldings& r : plan_rank_memory(s, g))
    held = std::max(held, r.weights + r.gradients + r.optimizer + r.reference + 3 * r.largest_unit);
  return held + p.dequantized + p.activations + p.logits;  // a 4-bit base's Linear in use, dequantized
}

double rank_device_bytes_offloaded(const Settings& s, const Grid& g, int64_t batch) {
  const MemoryPlan p = plan_memory(s, batch);
  double units = 0;
  for (const RankHoldings& r : plan_rank_memory(s, g)) units = std::max(units, 3 * r.largest_unit);
  return units + p.dequantized + p.activations + p.logits;
}

BatchChoice find_batch_size_cpu(const Settings& s, const Grid& g, int64_t sequences, double budget) {
  return find_batch_size(sequences, [&](int64_t b) { return rank_step_bytes(s, g, b) <= budget; });
}

namespace {

// One forward and backward of a `batch`-sequence micro-batch: does it fit in
// device memory? Out-of-memory is caught, and the memory released either way.
bool fits_on_device(ForwardBackward& step, Gpt& model, const ModelSettings& m, int64_t batch, torch::Device device) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0);  // leaves the run's random streams alone
  auto tokens = at::randint(0, m.vocab_size, {batch, m.seq_len}, gen, torch::kLong).to(device);
  bool ok = true;
  try {
    step.trial_step(Batch{tokens, tokens, batch * m.seq_len});
    synchronize(device);
  } catch (const c10::OutOfMemoryError&) {
    ok = false;
  }
  model->zero_grad();  // sets the gradients to none
  release_cached_memory(device);
  return ok;
}

}  // namespace

BatchChoice find_batch_size_on_device(ForwardBackward& step, Gpt& model, const ModelSettings& m, int64_t sequences,
                                      torch::Device device) {
  return find_batch_size(sequences, [&](int64_t b) { return fits_on_device(step, model, m, b, device); });
}

double cpu_memory_budget_bytes(const Settings& s) {
  if (s.run.memory_budget_mb > 0) return static_cast<double>(s.run.memory_budget_mb) * 1024.0 * 1024.0;
  const double available = static_cast<double>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  return 0.8 * available;
}

}  // namespace gputrain
