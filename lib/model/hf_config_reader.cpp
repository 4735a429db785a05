#include "model/hf_config_reader.h"

#include <cmath>

#include "util/error.h"

namespace gputrain {
namespace {

std::string text(int64_t v) { return std::to_string(v); }
std::string text(double v) { return nlohmann::json(v).dump(); }
std::string text(bool v) { return v ? "true" : "false"; }

bool same(int64_t a, int64_t b) { return a == b; }
bool same(bool a, bool b) { return a == b; }
bool same(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

}  // namespace

HfConfigReader::HfConfigReader(const nlohmann::json& config, std::string config_file, ModelSettings& m,
                               std::function<bool(const std::string&)> set_by_recipe)
    : config_(config), file_(std::move(config_file)), m_(m), set_by_recipe_(std::move(set_by_recipe)) {}

bool HfConfigReader::has(const char* key) const { return config_.contains(key) && !config_[key].is_null(); }

template <class T>
void HfConfigReader::assign(const char* recipe_key, T& field, T value, const std::string& shown,
                            std::optional<T> effective) {
  if (!set_by_recipe_(recipe_key)) {
    field = value;
    filled.push_back(recipe_key);
    return;
  }
  const T ours = effective ? *effective : field;
  if (same(ours, value)) return;
  problems.push_back({recipe_key,
                      "is " + text(ours) + ", but model.init_from's config.json ('" + file_ + "') has " + shown,
                      "leave " + std::string(recipe_key) + " out of the recipe (config.json sets it), or set " +
                          recipe_key + ": " + text(value)});
}

void HfConfigReader::take_int(const char* key, const char* recipe_key, int64_t& field, std::optional<int64_t> fallback,
                              std::optional<int64_t> effective) {
  if (!has(key)) {
    if (fallback) assign(recipe_key, field, *fallback, prefix_ + key + " absent (" + text(*fallback) + ")", effective);
    else refuse("has no " + prefix_ + key, "use a complete config.json");
    return;
  }
  if (!config_[key].is_number_integer()) {
    refuse("has " + prefix_ + key + " " + config_[key].dump() + ", not an integer", "use a valid config.json");
    return;
  }
  const int64_t v = config_[key].get<int64_t>();
  assign(recipe_key, field, v, prefix_ + key + " " + text(v), effective);
}

void HfConfigReader::take_float(const char* key, const char* recipe_key, double& field,
                                std::optional<double> fallback) {
  if (!has(key)) {
    if (fallback) assign(recipe_key, field, *fallback, prefix_ + key + " absent (" + text(*fallback) + ")", {});
    else refuse("has no " + prefix_ + key, "use a complete config.json");
    return;
  }
  if (!config_[key].is_number()) {
    refuse("has " + prefix_ + key + " " + config_[key].dump() + ", not a number", "use a valid config.json");
    return;
  }
  const double v = config_[key].get<double>();
  assign(recipe_key, field, v, prefix_ + key + " " + text(v), {});
}

void HfConfigReader::take_bool(const char* key, const char* recipe_key, bool& field, std::optional<bool> fallback) {
  if (!has(key)) {
    if (fallback) assign(recipe_key, field, *fallback, prefix_ + key + " absent (" + text(*fallback) + ")", {});
    else refuse("has no " + prefix_ + key, "use a complete config.json");
    return;
  }
  if (!config_[key].is_boolean()) {
    refuse("has " + prefix_ + key + " " + config_[key].dump() + ", not true or false", "use a valid config.json");
    return;
  }
  const bool v = config_[key].get<bool>();
  assign(recipe_key, field, v, prefix_ + key + " " + text(v), {});
}

void HfConfigReader::set_int(const char* recipe_key, int64_t& field, int64_t value, const std::string& shown,
                             std::optional<int64_t> effective) {
  assign(recipe_key, field, value, shown, effective);
}
void HfConfigReader::set_float(const char* recipe_key, double& field, double value, const std::string& shown) {
  assign(recipe_key, field, value, shown, {});
}
void HfConfigReader::set_bool(const char* recipe_key, bool& field, bool value, const std::string& shown) {
  assign(recipe_key, field, value, shown, {});
}

void HfConfigReader::set_switch(const char* recipe_key, Toggle& field, bool value, const std::string& shown,
                                bool effective) {
  if (!set_by_recipe_(recipe_key)) {
    field = value ? Toggle::kOn : Toggle::kOff;
    filled.push_back(recipe_key);
    return;
  }
  bool ours = effective;
  assign(recipe_key, ours, value, shown, std::optional<bool>(effective));
}

void HfConfigReader::take_switch(const char* key, const char* recipe_key, Toggle& field, bool fallback,
                                 bool effective) {
  if (has(key) && !config_[key].is_boolean()) {
    refuse("has " + prefix_ + key + " " + config_[key].dump() + ", not true or false", "use a valid config.json");
    return;
  }
  const bool v = has(key) ? config_[key].get<bool>() : fallback;
  set_switch(recipe_key, field, v, prefix_ + key + (has(key) ? " " : " absent (") + text(v) + (has(key) ? "" : ")"),
             effective);
}

void HfConfigReader::limit_seq_len(int64_t limit, const std::string& shown) {
  if (!set_by_recipe_("model.seq_len")) {
    if (m_.seq_len > limit) {
      m_.seq_len = limit;
      filled.push_back("model.seq_len");
    }
    return;
  }
  if (m_.seq_len > limit)
    problems.push_back({"model.seq_len",
                        "(" + text(m_.seq_len) + ") is longer than the " + text(limit) +
                            " positions of model.init_from's model (config.json '" + file_ + "': " + shown + ")",
                        "set model.seq_len to " + text(limit) + " or less"});
}

void HfConfigReader::default_bool(const char* recipe_key, bool& field, bool value) {
  if (set_by_recipe_(recipe_key)) return;
  field = value;
  filled.push_back(recipe_key);
}

HfConfigReader HfConfigReader::nested(const nlohmann::json& object, const std::string& path) const {
  HfConfigReader r(object, file_, m_, set_by_recipe_);
  r.prefix_ = prefix_ + path + ".";
  return r;
}

void HfConfigReader::merge(const HfConfigReader& child) {
  problems.insert(problems.end(), child.problems.begin(), child.problems.end());
  filled.insert(filled.end(), child.filled.begin(), child.filled.end());
}

void HfConfigReader::refuse(const std::string& what, const std::string& fix) {
  problems.push_back({"model.init_from", "config.json '" + file_ + "' " + what, fix});
}

void HfConfigReader::throw_if_problems(const std::string& source) const {
  if (problems.empty()) return;
  const KeyProblem& p = problems.front();
  throw data_error(source + ": " + (p.key == "model.init_from" ? "" : p.key + " ") + p.problem + "\n    fix: " + p.fix);
}

}  // namespace gputrain
