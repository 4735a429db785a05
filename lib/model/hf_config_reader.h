// A Hugging Face config.json read into model.* keys, in one of two modes: importing (a recipe
// with model.init_from: <HF folder> gets every key it leaves out from the file, and a key it sets
// must agree) or checking (the weights are read for settings already made: any disagreement is a
// DataError). Each architecture's import_config (model/architecture.h) says which config.json
// field is which key; this class does the rest and words the problems.
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/model_rules.h"
#include "config/settings.h"

namespace gputrain {

class HfConfigReader {
 public:
  // `set_by_recipe(key)`: whether the recipe sets that key (checking mode: always true).
  HfConfigReader(const nlohmann::json& config, std::string config_file, ModelSettings& m,
                 std::function<bool(const std::string&)> set_by_recipe);

  const nlohmann::json& config() const { return config_; }
  ModelSettings& settings() { return m_; }
  bool has(const char* key) const;  // present and not null
  // config[key] where it is an integer, else `fallback` (values other keys derive from; no message).
  int64_t int_or(const char* key, int64_t fallback) const;

  // config[key], or `fallback` where it is absent or null (no fallback: required), into the
  // recipe key's field. `effective` is the value the model uses now when the field alone does not
  // say it (mlp_width 0 = from mlp_ratio): compared instead of the field.
  void take_int(const char* key, const char* recipe_key, int64_t& field, std::optional<int64_t> fallback = {},
                std::optional<int64_t> effective = {});
  void take_float(const char* key, const char* recipe_key, double& field, std::optional<double> fallback = {});
  void take_bool(const char* key, const char* recipe_key, bool& field, std::optional<bool> fallback = {});
  // A value the architecture derives (`shown`: how config.json says it, for messages).
  void set_float(const char* recipe_key, double& field, double value, const std::string& shown);
  // A switch key (auto | true | false): `effective` is what the model does now.
  void take_switch(const char* key, const char* recipe_key, Toggle& field, bool fallback, bool effective);
  void set_switch(const char* recipe_key, Toggle& field, bool value, const std::string& shown, bool effective);
  // model.seq_len is the recipe's training window: at most the model's `limit` positions
  // (`shown`: config.json's field), and the smaller of the two when the recipe leaves it out.
  void limit_seq_len(int64_t limit, const std::string& shown);
  // Sets a key only where the recipe leaves it out (a value config.json implies but need not hold).
  void default_bool(const char* recipe_key, bool& field, bool value);
  // A setting of the file this architecture cannot train: named, with the fix.
  void refuse(const std::string& what, const std::string& fix);
  bool set_by_recipe(const std::string& key) const { return set_by_recipe_(key); }

  // The same reader over a nested object of config.json (`path`: its key, e.g. "rope_scaling"), for
  // messages; its problems and filled keys go to this reader by merge().
  HfConfigReader nested(const nlohmann::json& object, const std::string& path) const;
  void merge(const HfConfigReader& child);

  // Importing: problems (recipe key, what, fix) and the keys filled from the file.
  std::vector<KeyProblem> problems;
  std::vector<std::string> filled;
  // Checking: a DataError for the first problem, naming `source`.
  void throw_if_problems(const std::string& source) const;

  const std::string& file() const { return file_; }

 private:
  // config[key] (or `fallback`) with how to show it in messages; nullopt, refused, when it is missing
  // without a fallback or of another type.
  template <class T>
  std::optional<std::pair<T, std::string>> value_of(const char* key, std::optional<T> fallback);
  template <class T>
  void assign(const char* recipe_key, T& field, T value, const std::string& shown, std::optional<T> effective);

  const nlohmann::json& config_;
  std::string file_, prefix_;  // prefix_: "rope_scaling." inside a nested object
  ModelSettings& m_;
  std::function<bool(const std::string&)> set_by_recipe_;
};

}  // namespace gputrain
