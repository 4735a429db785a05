#include "metrics/parallel_reports.h"

#include <algorithm>
#include <cmath>

namespace gputrain {

using json = nlohmann::ordered_json;

namespace {

double ms(double seconds) { return std::round(seconds * 1e6) / 1e3; }
double thousandths(double v) { return std::round(v * 1000) / 1000; }

}  // namespace

json shard_traffic_report(const std::optional<ShardTraffic>& t, int64_t steps) {
  if (!t) return nullptr;
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  auto round3 = [](double v) { return std::round(v * 1000) / 1000; };
  json j;
  j["gathers_per_step"] = round3(static_cast<double>(t->gathers) / n);
  j["gathered_mb_per_step"] = round3(t->gathered_mb / n);
  j["gather_wait_ms_per_step"] = round3(t->gather_wait_s * 1000 / n);  // exposed: not hidden by prefetch
  j["reductions_per_step"] = round3(static_cast<double>(t->reductions) / n);
  j["reduced_mb_per_step"] = round3(t->reduced_mb / n);
  j["reduce_ms_per_step"] = round3(t->reduce_s * 1000 / n);
  return j;
}

json grad_sync_report(const std::optional<GradSyncTimes>& t) {
  if (!t) return nullptr;
  int64_t during = 0;
  json launches = json::array();
  for (const double s : t->bucket_start_s) {
    during += s < t->backward_end_s ? 1 : 0;
    launches.push_back(ms(s));
  }
  json j;
  j["buckets"] = t->buckets;
  j["started_during_backward"] = during;     // of the last step's buckets
  j["backward_ms"] = ms(t->backward_end_s);  // from the last micro-batch's backward start
  j["bucket_start_ms"] = launches;
  return j;
}

json pipeline_report(const std::optional<PipelineLayout>& p) {
  if (!p) return nullptr;
  json j;
  j["schedule"] = p->schedule;
  j["micro_batches"] = p->micro_batches;
  j["bubble_fraction"] = std::round(p->bubble_fraction * 1e4) / 1e4;
  json blocks = json::array();
  for (const auto& [first, last] : p->stage_blocks) blocks.push_back({first, last});
  j["stage_blocks"] = blocks;
  return j;
}

json memory_per_rank_report(const std::vector<RankMemory>& ranks) {
  json out = json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankMemory& m = ranks[r];
    json row = {{"rank", static_cast<int64_t>(r)},
                {"weights_mb", thousandths(m.weights_mb)},
                {"grads_mb", thousandths(m.grads_mb)},
                {"optimizer_state_mb", thousandths(m.optimizer_state_mb)}};
    if (m.stage) {
      row["stage"] = *m.stage;
      row["micro_batches_held"] = m.micro_batches_held;       // at the last step's peak
      row["activations_mb"] = thousandths(m.activations_mb);  // memory in use at that peak above the step's start
    }
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace gputrain
