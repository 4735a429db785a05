#include "config/recipe.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "config/schema.h"
#include "config/tree.h"
#include "config/validate.h"
#include "util/error.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

std::string read_recipe_text(const fs::path& p, const Origin& named_at) {
  std::error_code ec;
  std::ifstream in;
  if (fs::is_regular_file(p, ec)) in.open(p, std::ios::binary);
  if (!in.is_open()) {
    std::string where = named_at.file.empty() ? "" : named_at.str() + ": ";
    std::string why = !fs::exists(p, ec)        ? "no such file"
                      : fs::is_directory(p, ec) ? "it is a directory"
                                                : "permission denied";
    throw config_error(where + "cannot read recipe '" + p.string() + "': " + why + "\n    fix: check the path");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Loads one recipe file with its `extends:` bases merged underneath it.
ConfigNode load_with_bases(const fs::path& path, const std::string& display, const Origin& named_at,
                           std::vector<std::string>& chain, std::vector<std::string>& files) {
  std::string canon = fs::weakly_canonical(path).string();
  for (const auto& c : chain)
    if (c == canon)
      throw config_error(named_at.str() + ": extends: '" + display + "' extends itself (cycle: " + c +
                         ")\n    fix: remove the cycle");
  ConfigNode node = parse_yaml(read_recipe_text(path, named_at), display);

  ConfigNode merged{.kind = ConfigNode::Kind::kMap, .origin = node.origin};
  const ConfigNode* ext = node.find("extends");
  if (ext != nullptr) {
    std::vector<const ConfigNode*> bases;
    if (ext->kind == ConfigNode::Kind::kScalar) bases.push_back(ext);
    else if (ext->kind == ConfigNode::Kind::kSequence)
      for (const auto& i : ext->items) bases.push_back(&i);
    else
      throw config_error(ext->origin.str() + ": extends: expected a file name or a list of them, got " +
                         ext->kind_name() + "\n    fix: write extends: base.yaml or extends: [a.yaml, b.yaml]");
    chain.push_back(canon);
    for (const ConfigNode* b : bases) {
      if (b->kind != ConfigNode::Kind::kScalar)
        throw config_error(b->origin.str() + ": extends: each entry must be a file name, got " + b->kind_name());
      fs::path bp = b->scalar;
      if (bp.is_relative()) bp = path.parent_path() / bp;
      std::string shown = (fs::path(display).parent_path() / b->scalar).lexically_normal().string();
      if (!fs::exists(bp))
        throw config_error(b->origin.str() + ": extends: base recipe '" + shown +
                           "' does not exist\n    fix: base paths are relative to the recipe that names them");
      merge_into(merged, load_with_bases(bp, shown, b->origin, chain, files));
    }
    chain.pop_back();
    std::erase_if(node.entries, [](const auto& e) { return e.key == "extends"; });
  }
  merge_into(merged, node);
  files.push_back(display);
  return merged;
}

std::string format_double(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

void emit_yaml(YAML::Emitter& out, const nlohmann::ordered_json& j, bool flow) {
  if (j.is_object()) {
    if (j.empty()) {
      out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
      return;
    }
    out << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      out << YAML::Key << k << YAML::Value;
      emit_yaml(out, v, false);
    }
    out << YAML::EndMap;
  } else if (j.is_array()) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& v : j) emit_yaml(out, v, true);
    out << YAML::EndSeq;
  } else if (j.is_number_float()) {
    out << format_double(j.get<double>());
  } else if (j.is_number_integer()) {
    out << j.get<int64_t>();
  } else if (j.is_boolean()) {
    out << (j.get<bool>() ? "true" : "false");
  } else if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s.empty()) out << YAML::DoubleQuoted << "";
    else out << s;
  }
  (void)flow;
}

}  // namespace

const char* const kBuiltinQuickstartName = "<built-in quickstart>";

namespace {

// The typed settings of `tree`: the schema's keys, then (`import_pretrained`: a recipe being loaded,
// not a run's saved one, which holds every key) what model.init_from's config.json gives the keys
// the tree leaves out, then the defaults model.arch gives the rest.
void bind_recipe(const ConfigNode& tree, const ModelRules& rules, Settings& settings,
                 std::map<std::string, Origin>& origins, Diagnostics& diag, bool import_pretrained) {
  bind_settings(tree, settings, origins, diag);
  const auto set_by_recipe = [&](const std::string& key) { return !origins.at(key).is_default(); };
  if (import_pretrained && diag.errors().empty()) {
    const PretrainedImport imported = rules.import_pretrained(settings.model, set_by_recipe);
    for (const KeyProblem& p : imported.problems)
      diag.error(origins.at(set_by_recipe(p.key) ? p.key : "model.init_from"), p.key, p.problem, p.fix);
    for (const std::string& key : imported.filled) origins[key] = Origin{imported.config_file, 0, 0};
  }
  rules.apply_defaults(settings.model, set_by_recipe);
}

}  // namespace

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides, const RecipeRules& rules) {
  Recipe r;
  ConfigNode tree;
  if (path.empty()) {
    r.source = kBuiltinQuickstartName;
    tree = parse_yaml(builtin_quickstart_yaml(), kBuiltinQuickstartName);
    if (tree.find("extends") != nullptr)
      throw config_error(std::string(kBuiltinQuickstartName) + ": the built-in recipe cannot use extends");
    r.files.push_back(kBuiltinQuickstartName);
  } else {
    r.source = path;
    std::vector<std::string> chain;
    tree = load_with_bases(path, path, Origin{}, chain, r.files);
  }
  for (const auto& o : overrides) apply_override(tree, o);

  Diagnostics diag;
  bind_recipe(tree, rules.model, r.settings, r.origins, diag, /*import_pretrained=*/true);
  diag.throw_if_errors();  // cross-field rules only make sense on well-typed values
  validate_settings(r.settings, r.origins, rules, diag);
  diag.throw_if_errors();
  r.warnings = diag.warnings();
  return r;
}

Settings settings_from_saved_recipe(const std::string& yaml, const std::string& source, const ModelRules& rules) {
  Settings s;
  std::map<std::string, Origin> origins;
  Diagnostics diag;
  bind_recipe(parse_yaml(yaml, source), rules, s, origins, diag, /*import_pretrained=*/false);
  diag.throw_if_errors();
  return s;
}

std::string recipe_to_json(const Settings& s) { return settings_to_json(s).dump(2) + "\n"; }

std::string recipe_to_yaml(const Settings& s) {
  YAML::Emitter out;
  emit_yaml(out, settings_to_json(s), false);
  return std::string(out.c_str()) + "\n";
}

std::string recipe_hash(const Settings& s) {
  // FNV-1a over the canonical JSON: stable across runs and machines.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : settings_to_json(s).dump()) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace gputrain
