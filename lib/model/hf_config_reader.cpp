#include "model/hf_config_reader.h"

#include <cmath>
#include <type_traits>

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

template <class T>
std::optional<std::pair<T, std::string>> HfConfigReader::value_of(const char* key, std::optional<T> fallback) {
  if (!has(key)) {
    if (!fallback) {
      refuse("has no " + prefix_ + key, "use a complete config.json");
      return std::nullopt;
    }
    return std::make_pair(*fallback, prefix_ + key + " absent (" + text(*fallback) + ")");
  }
  const nlohmann::json& v = config_[key];
  const bool typed = std::is_same_v<T, bool>      ? v.is_boolean()
                     : std::is_same_v<T, int64_t> ? v.is_number_integer()
                                                  : v.is_number();
  if (!typed) {
    const char* wanted = std::is_same_v<T, bool>      ? "true or false"
                         : std::is_same_v<T, int64_t> ? "an integer"
                                                      : "a number";
    refuse("has " + prefix_ + key + " " + v.dump() + ", not " + wanted, "use a valid config.json");
    return std::nullopt;
  }
  const T value = v.get<T>();
  return std::make_pair(value, prefix_ + key + " " + text(value));
}

int64_t HfConfigReader::int_or(const char* key, int64_t fallback) const {
  return has(key) && config_[key].is_number_integer() ? config_[key].get<int64_t>() : fallback;
}

void HfConfigReader::take_int(const char* key, const char* recipe_key, int64_t& field, std::optional<int64_t> fallback,
                              std::optional<int64_t> effective) {
  if (auto v = value_of(key, fallback)) assign(recipe_key, field, v->first, v->second, effective);
}

void HfConfigReader::take_float(const char* key, const char* recipe_key, double& field,
                                std::optional<double> fallback) {
  if (auto v = value_of(key, fallback)) assign(recipe_key, field, v->first, v->second, {});
}

void HfConfigReader::take_bool(const char* key, const char* recipe_key, bool& field, std::optional<bool> fallback) {
  if (auto v = value_of(key, fallback)) assign(recipe_key, field, v->first, v->second, {});
}

void HfConfigReader::set_float(const char* recipe_key, double& field, double value, const std::string& shown) {
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
  if (auto v = value_of(key, std::optional<bool>(fallback)))
    set_switch(recipe_key, field, v->first, v->second, effective);
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
