#include "report/start_log.h"

#include <fmt/format.h>

#include "model/architecture.h"
#include "model/gpt_shapes.h"
#include "report/model_options_report.h"

namespace gputrain {

namespace {

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

}  // namespace

std::vector<std::string> start_log_lines(const Settings& s, const StartFacts& f) {
  std::vector<std::string> out;
  const ModelSettings& m = s.model;
  out.push_back(
      fmt::format("gputrain: {} on {} ({} threads), recipe {}", s.run.name, f.device, f.threads, f.recipe_source));
  out.push_back(fmt::format("model: {} {} layers, d_model {}, {} heads{}, seq_len {}, vocab {}: {:.2f}M parameters",
                            architecture(m).display_name, m.n_layer, m.d_model, m.n_head,
                            m.kv_heads() != m.n_head ? fmt::format(" ({} key/value)", m.kv_heads()) : "", m.seq_len,
                            m.vocab_size, static_cast<double>(f.parameters) / 1e6));
  if (m.lora.rank > 0) out.push_back("model: " + lora_log_line(s));
  if (m.moe.enabled())
    out.push_back(fmt::format(
        "model: mixture of experts every {} block(s): {} experts, top {}, capacity factor {}; {:.2f}M of the "
        "parameters are active per token",
        m.moe.every, m.moe.experts, m.moe.top_k, m.moe.capacity_factor, active_parameters(m) / 1e6));
  out.push_back("precision: " + f.precision);
  const auto state = static_cast<double>(f.optimizer_state_bytes);
  out.push_back(fmt::format("optimizer: {}; {:.1f} MiB of state ({:.2f} bytes per parameter)", f.optimizer, mib(state),
                            state / static_cast<double>(std::max<int64_t>(f.rank_parameters, 1))));
  if (!f.optimizer_placement.empty()) out.push_back("optimizer: " + f.optimizer_placement);
  if (f.recomputed_blocks > 0)
    out.push_back(fmt::format("activation checkpointing: {} of {} blocks recomputed in backward", f.recomputed_blocks,
                              m.n_layer));
  out.push_back("data: " + f.data);
  if (f.samples_per_epoch > 0)
    out.push_back(fmt::format(
        "data: {} windows per epoch; {} steps read {:.2f} epochs", f.samples_per_epoch, s.train.max_steps,
        static_cast<double>(s.train.max_steps * f.sequences_per_step) / static_cast<double>(f.samples_per_epoch)));
  if (f.entropy_floor)
    out.push_back(
        fmt::format("data: entropy floor {:.4f} nats/token (no model can reach a lower loss)", *f.entropy_floor));
  out.push_back(fmt::format("train: {} steps x {} tokens ({}grad_accum {} x batch {} x seq_len {}); output in {}",
                            s.train.max_steps, s.tokens_per_step() * f.dp,
                            f.dp > 1 ? fmt::format("{} processes x ", f.dp) : std::string(), s.train.grad_accum_steps,
                            s.train.per_device_batch_size, m.seq_len, f.output_dir));
  if (!f.parallelism.empty()) out.push_back("parallel: " + f.parallelism);
  if (f.resumed)
    out.push_back(fmt::format(
        "resume: continuing from {} at step {} ({} tokens seen; verified and read in {:.2f} s); data from sample {}",
        f.resumed->dir, f.resumed->step, f.resumed->tokens, f.resumed->read_s, f.resumed->first_sample));
  return out;
}

}  // namespace gputrain
