#include "config/tree.h"

#include <yaml-cpp/yaml.h>

#include "util/error.h"

namespace gputrain {

const ConfigNode* ConfigNode::find(const std::string& key) const {
  for (const auto& e : entries)
    if (e.key == key) return &e.value;
  return nullptr;
}

ConfigNode* ConfigNode::find(const std::string& key) {
  for (auto& e : entries)
    if (e.key == key) return &e.value;
  return nullptr;
}

std::string ConfigNode::kind_name() const {
  switch (kind) {
    case Kind::kNull:
      return "nothing (null)";
    case Kind::kScalar:
      return "'" + scalar + "'";
    case Kind::kSequence:
      return "a list";
    case Kind::kMap:
      return "a mapping";
  }
  return "?";
}

static Origin origin_of(const YAML::Mark& m, const std::string& file) {
  if (m.line < 0) return {file, 0, 0};
  return {file, m.line + 1, m.column + 1};
}

static ConfigNode convert(const YAML::Node& y, const std::string& file) {
  ConfigNode n;
  n.origin = origin_of(y.Mark(), file);
  switch (y.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      n.kind = ConfigNode::Kind::kNull;
      break;
    case YAML::NodeType::Scalar:
      n.kind = ConfigNode::Kind::kScalar;
      n.scalar = y.Scalar();
      n.quoted = y.Tag() == "!";
      break;
    case YAML::NodeType::Sequence:
      n.kind = ConfigNode::Kind::kSequence;
      for (const auto& item : y) n.items.push_back(convert(item, file));
      break;
    case YAML::NodeType::Map:
      n.kind = ConfigNode::Kind::kMap;
      for (const auto& kv : y) {
        Origin ko = origin_of(kv.first.Mark(), file);
        if (!kv.first.IsScalar())
          throw config_error(ko.str() + ": a key must be a plain name, not " +
                             (kv.first.IsMap() ? "a mapping" : "a list"));
        std::string key = kv.first.Scalar();
        if (const ConfigNode* dup = n.find(key); dup != nullptr) {
          Origin first;
          for (const auto& e : n.entries)
            if (e.key == key) first = e.key_origin;
          throw config_error(ko.str() + ": key '" + key + "' appears twice (first at " + first.str() +
                             ")\n    fix: keep one of them");
        }
        n.entries.push_back({key, ko, convert(kv.second, file)});
      }
      break;
  }
  return n;
}

ConfigNode parse_yaml(const std::string& text, const std::string& file) {
  YAML::Node y;
  try {
    y = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    Origin o = origin_of(e.mark, file);
    throw config_error(o.str() + ": YAML syntax error: " + e.msg +
                       "\n    fix: check indentation, colons and brackets near that position");
  }
  ConfigNode root = convert(y, file);
  if (root.kind == ConfigNode::Kind::kNull) {  // an empty file is an empty recipe
    root.kind = ConfigNode::Kind::kMap;
    root.origin = {file, 1, 1};
  }
  if (root.kind != ConfigNode::Kind::kMap)
    throw config_error(root.origin.str() + ": a recipe must be a mapping of sections (run:, model:, ...), not " +
                       root.kind_name() +
                       "\n    fix: start lines at the top level with a section name and a colon, e.g. `train:`, "
                       "and indent its keys under it (`gputrain print-config --reference` lists them)");
  return root;
}

void merge_into(ConfigNode& base, const ConfigNode& over) {
  if (base.kind != ConfigNode::Kind::kMap || over.kind != ConfigNode::Kind::kMap) {
    base = over;
    return;
  }
  for (const auto& e : over.entries) {
    if (ConfigNode* existing = base.find(e.key)) {
      merge_into(*existing, e.value);
      for (auto& be : base.entries)
        if (be.key == e.key) be.key_origin = e.key_origin;
    } else {
      base.entries.push_back(e);
    }
  }
  base.origin = over.origin;
}

void apply_override(ConfigNode& root, const std::string& assignment) {
  const Origin o{"--set " + assignment, 0, 0};
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw usage_error("--set " + assignment + ": expected KEY=VALUE, e.g. --set optim.lr=3e-4");
  std::string path = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);

  ConfigNode parsed;
  try {
    parsed = convert(YAML::Load(value), o.file);
  } catch (const YAML::Exception& e) {
    throw usage_error(o.file + ": the value is not valid YAML: " + e.msg);
  }
  auto stamp = [&o](auto& self, ConfigNode& n) -> void {
    n.origin = o;
    for (auto& i : n.items) self(self, i);
    for (auto& e : n.entries) e.key_origin = o, self(self, e.value);
  };
  stamp(stamp, parsed);
  if (value.empty()) {  // "--set run.name=" means the empty string, not null
    parsed.kind = ConfigNode::Kind::kScalar;
    parsed.quoted = true;
  }

  ConfigNode* node = &root;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) throw usage_error(o.file + ": '" + path + "' is not a key path; write section.key, e.g. optim.lr");
    if (node->kind == ConfigNode::Kind::kNull) node->kind = ConfigNode::Kind::kMap;
    if (node->kind != ConfigNode::Kind::kMap)
      throw config_error(o.file + ": " + path.substr(0, start ? start - 1 : 0) +
                         " holds a value, not a section, so it has no key '" + key + "'");
    ConfigNode* child = node->find(key);
    if (child == nullptr) {
      node->entries.push_back({key, o, ConfigNode{.kind = ConfigNode::Kind::kNull, .origin = o}});
      child = &node->entries.back().value;
    }
    if (dot == std::string::npos) {
      merge_into(*child, parsed);
      child->origin = o;
      return;
    }
    node = child;
    start = dot + 1;
  }
}

}  // namespace gputrain
