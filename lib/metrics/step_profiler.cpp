#include "metrics/step_profiler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "util/device.h"
#include "util/error.h"

namespace gputrain {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

namespace {

impl::ProfilerConfig config() { return impl::ProfilerConfig(impl::ProfilerState::KINETO); }

std::set<impl::ActivityType> activities(const torch::Device& d) {
  if (d.is_cuda()) return {impl::ActivityType::CPU, impl::ActivityType::CUDA};
  return {impl::ActivityType::CPU};
}

struct Row {
  int64_t calls = 0;
  double ns = 0;
};

// CPU ops nest (aten::linear calls aten::addmm): per thread, an op's self
// time is its duration less its direct children's, so the rows add up to the
// CPU time spent instead of counting nested work twice.
std::map<std::string, Row> cpu_self_times(const std::vector<prof::KinetoEvent>& events) {
  std::unordered_map<uint64_t, std::vector<const prof::KinetoEvent*>> by_thread;
  for (const auto& e : events)
    if (e.deviceType() == c10::DeviceType::CPU && !e.isAsync() && e.durationNs() > 0)
      by_thread[e.startThreadId()].push_back(&e);
  std::map<std::string, Row> rows;
  for (auto& [tid, list] : by_thread) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) {
      return a->startNs() != b->startNs() ? a->startNs() < b->startNs() : a->durationNs() > b->durationNs();
    });
    std::vector<std::pair<const prof::KinetoEvent*, double>> stack;  // open events and their self time so far
    auto close = [&rows](const std::pair<const prof::KinetoEvent*, double>& top) {
      Row& r = rows[top.first->name()];
      r.calls += 1;
      r.ns += std::max(0.0, top.second);
    };
    for (const auto* e : list) {
      while (!stack.empty() && stack.back().first->endNs() <= e->startNs()) {
        close(stack.back());
        stack.pop_back();
      }
      if (!stack.empty()) stack.back().second -= static_cast<double>(e->durationNs());
      stack.emplace_back(e, static_cast<double>(e->durationNs()));
    }
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) close(*it);
  }
  return rows;
}

std::map<std::string, Row> device_times(const std::vector<prof::KinetoEvent>& events) {
  std::map<std::string, Row> rows;
  for (const auto& e : events)
    if (e.deviceType() != c10::DeviceType::CPU) {
      Row& r = rows[e.name()];
      r.calls += 1;
      r.ns += static_cast<double>(e.durationNs());
    }
  return rows;
}

std::string shorten(std::string name) {
  // Kernel names carry full template signatures; the table keeps their start.
  constexpr size_t kMax = 110;
  for (char& c : name)
    if (c == '|' || c == '\n') c = ' ';
  return name.size() > kMax ? name.substr(0, kMax - 3) + "..." : name;
}

}  // namespace

std::string profile_table(const prof::ProfilerResult& result, bool device_events, int64_t steps, double wall_ms) {
  const auto rows_map = device_events ? device_times(result.events()) : cpu_self_times(result.events());
  std::vector<std::pair<std::string, Row>> rows(rows_map.begin(), rows_map.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  double total_ns = 0;
  for (const auto& [name, r] : rows) total_ns += r.ns;
  const double total_ms = total_ns / 1e6, per_step = static_cast<double>(steps);
  std::string out = fmt::format("# Profile of {} step{}\n\n", steps, steps == 1 ? "" : "s");
  out += fmt::format("- wall time: {:.2f} ms per step\n", wall_ms / per_step);
  if (device_events)
    out += fmt::format("- device time (kernels and copies, summed): {:.2f} ms per step, {:.0f}% of the wall time{}\n",
                       total_ms / per_step, 100.0 * total_ms / std::max(wall_ms, 1e-9),
                       total_ms < 0.8 * wall_ms ? " (the device waits on the host: launch or sync bound)" : "");
  else out += fmt::format("- CPU op self time (all threads, summed): {:.2f} ms per step\n", total_ms / per_step);
  out += fmt::format("\n| {} | calls per step | ms per step | share |\n|---|---:|---:|---:|\n",
                     device_events ? "kernel or copy" : "op (self time)");
  constexpr size_t kTop = 40;
  double shown = 0;
  for (size_t i = 0; i < rows.size() && i < kTop; ++i) {
    const auto& [name, r] = rows[i];
    shown += r.ns;
    out += fmt::format("| {} | {:.1f} | {:.3f} | {:.1f}% |\n", shorten(name), static_cast<double>(r.calls) / per_step,
                       r.ns / 1e6 / per_step, 100.0 * r.ns / std::max(total_ns, 1.0));
  }
  if (rows.size() > kTop)
    out += fmt::format("| ({} others) | | {:.3f} | {:.1f}% |\n", rows.size() - kTop,
                       (total_ns - shown) / 1e6 / per_step, 100.0 * (total_ns - shown) / std::max(total_ns, 1.0));
  return out;
}

StepProfiler::StepProfiler(int64_t first_step, int64_t steps, torch::Device device, std::filesystem::path dir)
    : first_(first_step), last_(first_step + steps - 1), device_(device), dir_(std::move(dir)) {
  if (first_ > 0) prof::prepareProfiler(config(), activities(device_));  // loads CUPTI before the timed steps
}

StepProfiler::~StepProfiler() {
  if (active_) {
    try {
      prof::disableProfiler();
    } catch (...) {  // a destructor during unwinding: the run's own error is the one to report
    }
  }
}

void StepProfiler::before_step(int64_t step) {
  if (first_ == 0 || step != first_) return;
  synchronize(device_);  // earlier steps' kernels stay out of the window
  prof::enableProfiler(config(), activities(device_));
  active_ = true;
  start_ = std::chrono::steady_clock::now();
}

void StepProfiler::after_step(int64_t step) {
  if (!active_ || step != last_) return;
  synchronize(device_);
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  active_ = false;
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw runtime_error("cannot create " + dir_.string() + " for metrics.profile_at: " + ec.message());
  const std::string trace = (dir_ / "trace.json").string();
  result->save(trace);
  const std::string table = profile_table(*result, device_.is_cuda(), last_ - first_ + 1, wall_ms);
  std::ofstream(dir_ / "ops.md") << table;
  spdlog::info("profile: steps {}-{} written to {} and ops.md", first_, last_, trace);
}

}  // namespace gputrain
