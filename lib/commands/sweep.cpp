#include "commands/sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "config/recipe.h"
#include "config/tree.h"
#include "metrics/run_report.h"
#include "model/architecture.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "util/atomic_file.h"
#include "util/device.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/signals.h"
#include "util/stopwatch.h"
#include "util/text_file.h"

extern char** environ;

namespace gputrain {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// A YAML value as --set takes it back.
std::string yaml_text(const ConfigNode& n) {
  if (n.kind == ConfigNode::Kind::kSequence) {
    std::string s = "[";
    for (size_t i = 0; i < n.items.size(); ++i) s += (i ? ", " : "") + yaml_text(n.items[i]);
    return s + "]";
  }
  if (n.kind == ConfigNode::Kind::kScalar && n.quoted) {
    std::string s = "'";
    for (char c : n.scalar) s += c == '\'' ? std::string("''") : std::string(1, c);
    return s + "'";
  }
  if (n.kind == ConfigNode::Kind::kScalar) return n.scalar;
  throw usage_error("--grid values are scalars or lists, not " + n.kind_name() +
                    "\n    fix: e.g. --grid optim.lr=[1e-3,3e-3]");
}

std::pair<std::string, std::string> split_assignment(const std::string& item, const std::string& flag) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos || eq == 0)
    throw usage_error(flag + " '" + item + "' is not KEY=VALUES\n    fix: e.g. " + flag +
                      (flag == "--grid" ? " optim.lr=[1e-3,3e-3]" : " optim.lr=1e-4:1e-2:log"));
  return {item.substr(0, eq), item.substr(eq + 1)};
}

// --grid KEY=[v1, v2]: the key and its values as YAML texts.
std::pair<std::string, std::vector<std::string>> parse_grid(const std::string& item) {
  auto [key, text] = split_assignment(item, "--grid");
  const ConfigNode list = parse_yaml("values: " + text, "--grid " + key);
  const ConfigNode* values = list.find("values");
  if (values == nullptr || values->kind != ConfigNode::Kind::kSequence || values->items.empty())
    throw usage_error("--grid " + key + " needs a non-empty list, not '" + text + "'\n    fix: e.g. --grid " + key +
                      "=[1,2]");
  std::vector<std::string> out;
  for (const ConfigNode& v : values->items) out.push_back(yaml_text(v));
  return {key, out};
}

struct Range {
  std::string key;
  double lo = 0, hi = 0;
  std::string kind;  // "" (uniform), log, int
};

Range parse_range(const std::string& item) {
  auto [key, text] = split_assignment(item, "--range");
  Range r{key, 0, 0, ""};
  const size_t a = text.find(':');
  const size_t b = a == std::string::npos ? a : text.find(':', a + 1);
  try {
    if (a == std::string::npos) throw std::invalid_argument("no ':'");
    r.lo = std::stod(text.substr(0, a));
    r.hi = std::stod(text.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1));
    if (b != std::string::npos) r.kind = text.substr(b + 1);
  } catch (const std::exception&) {
    r.kind = "?";
  }
  if (r.kind == "?" || (r.kind != "" && r.kind != "log" && r.kind != "int") || !(r.lo < r.hi) ||
      (r.kind == "log" && r.lo <= 0))
    throw usage_error("--range '" + item + "' is not KEY=LO:HI[:log|:int] with LO < HI (LO > 0 for log)" +
                      "\n    fix: e.g. --range optim.lr=1e-4:1e-2:log");
  return r;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string trial_name(size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "trial_%03zu", i);
  return buf;
}

json trials_json(const std::vector<SweepTrial>& trials) {
  json out = json::array();
  for (const SweepTrial& t : trials) {
    json values = json::object();
    for (const auto& [k, v] : t.values) values[k] = v;
    out.push_back({{"name", t.name}, {"values", values}});
  }
  return out;
}

std::vector<std::string> trial_sets(const SweepOptions& o, const SweepTrial& t) {
  std::vector<std::string> sets = o.sets;
  for (const auto& [k, v] : t.values) sets.push_back(k + "=" + v);
  return sets;
}

// A trial whose summary says it finished.
bool finished(const fs::path& dir) {
  const fs::path s = dir / "summary.json";
  if (!fs::exists(s)) return false;
  try {
    return parse_json_file(s, "run summary", "").value("status", "") == "ok";
  } catch (const Error&) {
    return false;
  }
}

pid_t spawn_trial(const SweepOptions& o, const SweepTrial& t, const std::vector<std::string>& extra,
                  const fs::path& dir, const fs::path& log) {
  std::vector<std::string> args = {o.executable, "run"};
  if (!o.recipe.empty()) args.push_back(o.recipe);
  for (const std::string& s : trial_sets(o, t)) args.insert(args.end(), {"--set", s});
  for (const std::string& s : extra) args.insert(args.end(), {"--set", s});
  args.insert(args.end(), {"--output-dir", dir.string(), "--set", "metrics.progress=off"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, o.executable.c_str(), &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) throw runtime_error("cannot start '" + o.executable + "': " + std::strerror(rc));
  return pid;
}

// The ranked table: by eval loss (else final loss), unfinished trials last.
json ranked_results(const std::vector<SweepTrial>& trials, const fs::path& root) {
  json rows = json::array();
  for (const SweepTrial& t : trials) {
    json row = {{"trial", t.name}, {"values", json::object()}};
    for (const auto& [k, v] : t.values) row["values"][k] = v;
    const fs::path s = root / t.name / "summary.json";
    json summary = fs::exists(s) ? json(parse_json_file(s, "run summary", "rerun the sweep")) : json::object();
    row["status"] = summary.value("status", "not run");
    for (const char* k : {"eval_loss", "final_loss", "steps", "wall_s", "tokens_per_s"})
      row[k] = summary.contains(k) ? summary[k] : json(nullptr);
    rows.push_back(row);
  }
  auto score = [](const json& r) -> double {
    if (r["status"] != "ok") return INFINITY;
    const json& v = r["eval_loss"].is_number() ? r["eval_loss"] : r["final_loss"];
    return v.is_number() ? v.get<double>() : INFINITY;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) { return score(a) < score(b); });
  return rows;
}

std::string results_markdown(const json& rows) {
  std::string md = "| rank | trial |";
  std::vector<std::string> keys;
  if (!rows.empty())
    for (auto it = rows[0]["values"].begin(); it != rows[0]["values"].end(); ++it) keys.push_back(it.key());
  for (const auto& k : keys) md += " " + k + " |";
  md += " eval loss | final loss | status |\n|---|---|";
  for (size_t i = 0; i < keys.size(); ++i) md += "---|";
  md += "---|---|---|\n";
  int rank = 1;
  for (const json& r : rows) {
    // Appended piece by piece: g++ 12 warns (-Wstringop-overflow, wrongly) on chains of temporaries.
    auto cell = [&md](const std::string& text) { md.append(" ").append(text).append(" |"); };
    auto num = [](const json& v) { return v.is_number() ? number_text(v.get<double>()) : std::string("-"); };
    md.append("|");
    cell(std::to_string(rank++));
    cell(r["trial"].get<std::string>());
    for (const auto& k : keys) cell(r["values"][k].get<std::string>());
    cell(num(r["eval_loss"]));
    cell(num(r["final_loss"]));
    cell(r["status"].get<std::string>());
    md.append("\n");
  }
  return md;
}

}  // namespace

std::vector<SweepTrial> plan_sweep(const SweepOptions& o) {
  std::vector<std::pair<std::string, std::vector<std::string>>> grid;
  for (const std::string& g : o.grid) grid.push_back(parse_grid(g));
  std::vector<Range> ranges;
  for (const std::string& r : o.ranges) ranges.push_back(parse_range(r));
  std::vector<SweepTrial> trials;
  if (o.random > 0) {
    std::mt19937_64 rng(o.seed);
    for (int64_t i = 0; i < o.random; ++i) {
      SweepTrial t{trial_name(static_cast<size_t>(i)), {}};
      for (const auto& [key, values] : grid)
        t.values.emplace_back(key, values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)]);
      for (const Range& r : ranges) {
        if (r.kind == "int") {  // LO..HI inclusive
          std::uniform_int_distribution<int64_t> pick(std::llround(r.lo), std::llround(r.hi));
          t.values.emplace_back(r.key, std::to_string(pick(rng)));
          continue;
        }
        const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
        const double v = r.kind == "log" ? std::exp(std::log(r.lo) + u * (std::log(r.hi) - std::log(r.lo)))
                                         : r.lo + u * (r.hi - r.lo);
        t.values.emplace_back(r.key, number_text(v));
      }
      trials.push_back(std::move(t));
    }
    return trials;
  }
  if (!ranges.empty())
    throw usage_error("--range needs --random N (how many draws)\n    fix: add --random 8, or use --grid lists");
  if (grid.empty())
    throw usage_error(
        "a sweep needs --grid KEY=[...] or --random N with --range\n    fix: e.g. --grid optim.lr=[1e-3,3e-3]");
  size_t total = 1;
  for (const auto& g : grid) total *= g.second.size();
  for (size_t i = 0; i < total; ++i) {
    SweepTrial t{trial_name(i), {}};
    size_t rest = i;  // the last key varies fastest
    std::vector<std::pair<std::string, std::string>> values(grid.size());
    for (size_t k = grid.size(); k-- > 0;) {
      values[k] = {grid[k].first, grid[k].second[rest % grid[k].second.size()]};
      rest /= grid[k].second.size();
    }
    t.values = std::move(values);
    trials.push_back(std::move(t));
  }
  return trials;
}

int run_sweep(const SweepOptions& o) {
  const std::vector<SweepTrial> trials = plan_sweep(o);
  // Every trial's recipe is checked before any starts: a bad key fails the sweep at once.
  std::string name;
  for (const SweepTrial& t : trials) {
    const Recipe r = load_recipe(o.recipe, trial_sets(o, t), recipe_rules());
    name = r.settings.run.name;
  }
  const fs::path root = o.out.empty() ? fs::path("sweeps") / name : fs::path(o.out);
  fs::create_directories(root / "logs");
  const json plan = {{"recipe", o.recipe}, {"sets", o.sets}, {"trials", trials_json(trials)}};
  const fs::path state = root / "sweep.json";
  if (fs::exists(state)) {
    const json earlier = parse_json_file(state, "sweep file", "use another --out");
    if (json(earlier["trials"]) != plan["trials"] || json(earlier["sets"]) != plan["sets"])
      throw usage_error("'" + root.string() + "' holds a sweep of other trials (" + state.string() + ")" +
                        "\n    fix: rerun it with the same arguments to continue it, or use another --out");
  }
  write_file_atomic(state.string(), plan.dump(2) + "\n");

  // Slots share the machine: each trial gets the cores / K threads, or GPU (slot mod GPUs).
  const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(o.parallel, static_cast<int64_t>(trials.size())));
  const auto gpus = static_cast<int64_t>(torch::cuda::device_count());
  const int64_t threads = std::max<int64_t>(1, resolve_threads(0) / slots);
  std::vector<size_t> todo;
  for (size_t i = 0; i < trials.size(); ++i) {
    if (finished(root / trials[i].name)) spdlog::info("sweep: {} finished earlier; not rerun", trials[i].name);
    else todo.push_back(i);
  }
  spdlog::info("sweep: {} trials in {} ({} to run, {} at a time)", trials.size(), root.string(), todo.size(), slots);
  StopSignals signals({"SIGTERM", "SIGUSR1"});
  std::map<pid_t, std::pair<size_t, int64_t>> running;  // pid -> trial, slot
  std::vector<bool> slot_busy(static_cast<size_t>(slots), false);
  size_t next = 0;
  int failed = 0, forwarded = 0;
  const auto started = SteadyClock::now();
  // Once a stop signal is forwarded no trial starts: the loop ends when the running ones have stopped.
  while ((forwarded == 0 && next < todo.size()) || !running.empty()) {
    if (StopSignals::requested() != 0 && forwarded == 0) {
      forwarded = StopSignals::requested();
      for (const auto& [pid, what] : running) ::kill(pid, forwarded);  // they save and stop
      failpoint("sweep.forwarded");                                    // tests let the trials go on only from here
    }
    while (forwarded == 0 && next < todo.size() && static_cast<int64_t>(running.size()) < slots) {
      const int64_t slot = std::find(slot_busy.begin(), slot_busy.end(), false) - slot_busy.begin();
      const SweepTrial& t = trials[todo[next]];
      std::vector<std::string> extra;
      if (gpus > 0) extra.push_back("run.device=cuda:" + std::to_string(slot % gpus));
      else extra.push_back("run.threads=" + std::to_string(threads));
      std::string shown;
      for (const auto& [k, v] : t.values) shown += (shown.empty() ? "" : ", ") + k + "=" + v;
      spdlog::info("sweep: {} starts ({})", t.name, shown);
      running[spawn_trial(o, t, extra, root / t.name, root / "logs" / (t.name + ".log"))] = {todo[next], slot};
      slot_busy[static_cast<size_t>(slot)] = true;
      ++next;
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const auto [index, slot] = running.at(pid);
    running.erase(pid);
    slot_busy[static_cast<size_t>(slot)] = false;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const SweepTrial& t = trials[index];
    if (code == 0) {
      const json s = parse_json_file(root / t.name / "summary.json", "run summary", "rerun the sweep");
      spdlog::info(
          "sweep: {} done: eval loss {}, final loss {}", t.name,
          s.contains("eval_loss") && s["eval_loss"].is_number() ? number_text(s["eval_loss"].get<double>()) : "-",
          s.contains("final_loss") && s["final_loss"].is_number() ? number_text(s["final_loss"].get<double>()) : "-");
    } else if (forwarded == 0) {
      ++failed;
      spdlog::warn("sweep: {} failed (exit {}); its output: {}", t.name, code,
                   (root / "logs" / (t.name + ".log")).string());
    }
  }
  const json rows = ranked_results(trials, root);
  write_file_atomic((root / "results.json").string(), rows.dump(2) + "\n");
  const std::string md = results_markdown(rows);
  write_file_atomic((root / "results.md").string(), md);
  std::vector<std::string> dirs;
  for (const SweepTrial& t : trials)
    if (fs::exists(root / t.name / "metrics.jsonl")) dirs.push_back((root / t.name).string());
  if (!dirs.empty()) write_file_atomic((root / "report.html").string(), render_report_html(collect_report_data(dirs)));
  std::printf("%s", md.c_str());
  std::fflush(stdout);
  spdlog::info("sweep: {} in {:.0f} s; table in {}, report in {}", forwarded ? "stopped" : "done",
               seconds_since(started), (root / "results.md").string(), (root / "report.html").string());
  if (forwarded) return forwarded == SIGINT ? 130 : 143;
  return failed > 0 ? 1 : 0;
}

}  // namespace gputrain
