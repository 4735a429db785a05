// A recipe as a tree of YAML values that remember where they came from, so
// that every later error can name file:line:col. Recipes, their `extends:`
// bases and --set overrides are all merged at this level, before typing.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "config/diagnostics.h"

namespace gputrain {

struct ConfigNode {
  enum class Kind { kNull, kScalar, kSequence, kMap };
  struct Entry;

  Kind kind = Kind::kNull;
  std::string scalar;             // kScalar: the text as written
  bool quoted = false;            // kScalar: written in quotes (always a string)
  std::vector<ConfigNode> items;  // kSequence
  std::vector<Entry> entries;     // kMap, in file order
  Origin origin;

  const ConfigNode* find(const std::string& key) const;
  ConfigNode* find(const std::string& key);
  std::string kind_name() const;
};

struct ConfigNode::Entry {
  std::string key;
  Origin key_origin;
  ConfigNode value;
};

// Parses YAML text; `file` is used in origins and messages. Throws a config
// Error naming file:line:col for syntax errors and duplicate keys.
ConfigNode parse_yaml(const std::string& text, const std::string& file);

// Maps merge key by key (recursively); anything else in `over` replaces `base`.
void merge_into(ConfigNode& base, const ConfigNode& over);

// Applies one "a.b.c=value" override; the value is parsed as YAML.
void apply_override(ConfigNode& root, const std::string& assignment);

}  // namespace gputrain
