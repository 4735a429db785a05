#include "metrics/run_report.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "config/recipe.h"
#include "config/schema.h"
#include "model/architecture.h"
#include "util/error.h"
#include "util/text_file.h"
#include "util/version.h"

namespace gputrain {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const std::string& report_page_template();  // report_page.html, embedded at build time

namespace {

// Keys that differ between any two runs by their nature, not by choice.
const std::set<std::string> kPerRunKeys = {"run.output_dir", "checkpoint.dir", "checkpoint.resume"};

// metrics.jsonl as series: every number (nested objects' as key/sub) at its line's step. A torn
// last line (a run killed while writing) is left out.
json read_series(const fs::path& file) {
  std::ifstream in(file);
  json series = json::object();
  std::string line;
  int64_t n = 0;
  std::function<void(const std::string&, const json&, int64_t)> add = [&](const std::string& key, const json& v,
                                                                          int64_t step) {
    if (v.is_number()) series[key].push_back({step, v});
    if (v.is_object())
      for (auto it = v.begin(); it != v.end(); ++it) add(key + "/" + it.key(), it.value(), step);
  };
  while (std::getline(in, line)) {
    ++n;
    json rec = json::parse(line, nullptr, false);
    if (rec.is_discarded() || !rec.is_object() || !rec.contains("step")) {
      if (in.peek() == EOF) break;  // the torn last line
      throw data_error("'" + file.string() + "' line " + std::to_string(n) +
                       " is not a metrics record\n    fix: point gputrain report at a run's output folder");
    }
    const int64_t step = rec["step"].get<int64_t>();
    for (auto it = rec.begin(); it != rec.end(); ++it)
      if (it.key() != "step") add(it.key(), it.value(), step);
  }
  return series;
}

// The resolved recipe as dotted keys (the schema's names), or null when it cannot be read back.
json flat_recipe(const fs::path& dir, json& notes) {
  const fs::path file = dir / "recipe.resolved.yaml";
  if (!fs::exists(file)) return nullptr;
  try {
    const Settings s = settings_from_saved_recipe(read_text_file(file), file.string(), architecture_rules());
    json flat = json::object();
    std::function<void(const std::string&, const json&)> walk = [&](const std::string& prefix, const json& v) {
      if (v.is_object() && !v.empty()) {
        for (auto it = v.begin(); it != v.end(); ++it)
          walk(prefix.empty() ? it.key() : prefix + "." + it.key(), it.value());
      } else {
        flat[prefix] = v;
      }
    };
    walk("", settings_to_json(s));
    return flat;
  } catch (const Error& e) {
    notes.push_back(file.string() + " was left out of the recipe comparison: " + e.what());
    return nullptr;
  }
}

// Legend names: the folders' names, with their parents' where two would be the same.
std::vector<std::string> run_names(const std::vector<fs::path>& dirs) {
  std::vector<std::string> names;
  for (const auto& d : dirs) names.push_back(d.filename().string());
  for (size_t i = 0; i < names.size(); ++i)
    if (std::count(names.begin(), names.end(), names[i]) > 1)
      for (size_t j = 0; j < dirs.size(); ++j)
        if (dirs[j].filename() == dirs[i].filename())
          names[j] = (dirs[j].parent_path().filename() / dirs[j].filename()).string();
  return names;
}

json differences(const std::vector<json>& recipes) {
  std::set<std::string> keys;
  size_t readable = 0;
  for (const json& r : recipes)
    if (r.is_object()) {
      ++readable;
      for (auto it = r.begin(); it != r.end(); ++it) keys.insert(it.key());
    }
  json out = json::array();
  if (readable < 2) return out;
  for (const std::string& key : keys) {
    if (kPerRunKeys.count(key)) continue;
    json values = json::array();
    std::set<std::string> distinct;
    for (const json& r : recipes) {
      const json v = r.is_object() && r.contains(key) ? r[key] : json(nullptr);
      values.push_back(v);
      if (r.is_object()) distinct.insert(v.dump());
    }
    if (distinct.size() > 1) out.push_back({{"key", key}, {"values", values}});
  }
  return out;
}

}  // namespace

json collect_report_data(const std::vector<std::string>& run_dirs) {
  std::vector<fs::path> dirs;
  for (const std::string& d : run_dirs) {
    const fs::path dir = fs::absolute(d).lexically_normal();
    if (!fs::is_regular_file(dir / "metrics.jsonl"))
      throw data_error("'" + d +
                       "' is not a run folder: it has no metrics.jsonl\n    fix: name the output folders of "
                       "runs (run.output_dir, runs/<run.name> by default)");
    dirs.push_back(dir.filename().empty() ? dir.parent_path() : dir);
  }
  const std::vector<std::string> names = run_names(dirs);
  json data = {{"generator", version_string()}, {"runs", json::array()}, {"notes", json::array()}};
  std::vector<json> recipes;
  for (size_t i = 0; i < dirs.size(); ++i) {
    json run = {{"name", names[i]}, {"dir", dirs[i].string()}, {"series", read_series(dirs[i] / "metrics.jsonl")}};
    const fs::path summary = dirs[i] / "summary.json";
    run["summary"] =
        fs::exists(summary) ? json(parse_json_file(summary, "run summary", "rerun or resume the run")) : json::object();
    run["status"] = run["summary"].value("status", "running (no summary.json yet)");
    data["runs"].push_back(std::move(run));
    recipes.push_back(flat_recipe(dirs[i], data["notes"]));
  }
  data["differences"] = differences(recipes);
  return data;
}

std::string render_report_html(const json& data) {
  // JSON inside a <script> element: "</" would end the element early.
  std::string payload = data.dump(-1, ' ', false, json::error_handler_t::replace);
  for (size_t at = payload.find("</"); at != std::string::npos; at = payload.find("</", at + 3))
    payload.replace(at, 2, "<\\/");
  std::string page = report_page_template();
  const std::string marker = "@GPUTRAIN_REPORT_DATA@";
  page.replace(page.find(marker), marker.size(), payload);
  return page;
}

}  // namespace gputrain
