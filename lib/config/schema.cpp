#include "config/schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "util/signals.h"

namespace gputrain {
namespace {

using json = nlohmann::ordered_json;
constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// --- scalar parsing ----------------------------------------------------------

const std::string& scalar_of(const ConfigNode& n, const char* expected) {
  if (n.kind != ConfigNode::Kind::kScalar)
    throw FieldProblem{std::string("expected ") + expected + ", got " + n.kind_name(), ""};
  return n.scalar;
}

bool parse_double(const std::string& s, double& out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e && std::isfinite(out);
}

int64_t read_int(const ConfigNode& n, int64_t lo, int64_t hi) {
  const std::string& s = scalar_of(n, "a whole number");
  int64_t v = 0;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  auto r = std::from_chars(b, e, v);
  if (r.ec != std::errc() || r.ptr != e) {
    double d = 0;  // accept 1e6 and 1000.0, which are whole numbers
    if (!parse_double(s, d) || d != std::floor(d) || std::fabs(d) > 9e18)
      throw FieldProblem{"expected a whole number, got '" + s + "'", "write an integer such as 12"};
    v = static_cast<int64_t>(d);
  }
  if (v < lo || v > hi) {
    std::string range =
        hi == kMaxInt ? ">= " + std::to_string(lo) : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    throw FieldProblem{"must be " + range + ", got " + s, "use a value " + range};
  }
  return v;
}

struct FloatRange {
  double lo = -INFINITY, hi = INFINITY;
  bool lo_open = false, hi_open = false;
  std::string str() const {
    std::string a = std::isinf(lo) ? "" : (lo_open ? "> " : ">= ") + json(lo).dump();
    std::string b = std::isinf(hi) ? "" : (hi_open ? "< " : "<= ") + json(hi).dump();
    if (!a.empty() && !b.empty()) return a + " and " + b;
    return a + b;
  }
  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
  json schema() const {  // JSON Schema of a number in this range
    json s = {{"type", "number"}};
    if (!std::isinf(lo)) s[lo_open ? "exclusiveMinimum" : "minimum"] = lo;
    if (!std::isinf(hi)) s[hi_open ? "exclusiveMaximum" : "maximum"] = hi;
    return s;
  }
};

json integer_schema(int64_t lo, int64_t hi) {
  json s = {{"type", "integer"}, {"minimum", lo}};
  if (hi != kMaxInt) s["maximum"] = hi;
  return s;
}

// A word or a value of `schema` ("auto" or an integer, "dynamic" or a number).
json word_or(const std::string& word, json schema) { return {{"anyOf", json::array({{{"const", word}}, schema})}}; }

// One value of `schema`, or a list of them (at least one).
json one_or_list(const json& schema, bool unique = false) {
  json list = {{"type", "array"}, {"items", schema}, {"minItems", 1}};
  if (unique) list["uniqueItems"] = true;
  return {{"anyOf", json::array({schema, list})}};
}

const json kStringSchema = {{"type", "string"}};

double read_float(const ConfigNode& n, const FloatRange& range) {
  const std::string& s = scalar_of(n, "a number");
  double v = 0;
  if (!parse_double(s, v)) throw FieldProblem{"expected a number, got '" + s + "'", "write a number such as 3e-4"};
  if (!range.contains(v)) throw FieldProblem{"must be " + range.str() + ", got " + s, "use a value " + range.str()};
  return v;
}

bool read_bool(const ConfigNode& n) {
  const std::string& s = scalar_of(n, "true or false");
  std::string l;
  for (char c : s) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "true" || l == "yes" || l == "on") return true;
  if (l == "false" || l == "no" || l == "off") return false;
  throw FieldProblem{"expected true or false, got '" + s + "'", "write true or false"};
}

std::string read_string(const ConfigNode& n) { return scalar_of(n, "a string"); }

template <class E>
using EnumTable = std::vector<std::pair<std::string, E>>;

template <class E>
std::string enum_choices(const EnumTable<E>& t) {
  std::string s;
  for (const auto& [name, _] : t) s += (s.empty() ? "" : " | ") + name;
  return s;
}

template <class E>
E read_enum(const ConfigNode& n, const EnumTable<E>& t) {
  const std::string& s = scalar_of(n, ("one of " + enum_choices(t)).c_str());
  for (const auto& [name, v] : t)
    if (name == s) return v;
  std::vector<std::string> names;
  for (const auto& [name, _] : t) names.push_back(name);
  std::string guess = did_you_mean(s, names);
  throw FieldProblem{"'" + s + "' is not one of " + enum_choices(t),
                     guess.empty() ? "use one of " + enum_choices(t) : "did you mean '" + guess + "'?"};
}

template <class E>
json enum_schema(const EnumTable<E>& t) {
  json names = json::array();
  // YAML's true and false are booleans; validation reads them as the words, quoted or not.
  for (const auto& [name, _] : t) {
    if (name == "true" || name == "false") names.push_back(name == "true");
    names.push_back(name);
  }
  return {{"enum", names}};
}

template <class E>
std::string enum_name(const EnumTable<E>& t, E v) {
  for (const auto& [name, value] : t)
    if (value == v) return name;
  return "?";
}

// --- field factories -----------------------------------------------------------
// Each takes the dotted path and an accessor returning a reference into Settings;
// KEY(a.b) writes both from one token so they can never disagree.
// clang-format off
#define KEY(p) #p, [](auto& s) -> auto& { return s.p; }
// clang-format on

template <class Acc>
FieldSpec int_field(std::string path, Acc acc, int64_t lo, int64_t hi, std::string doc) {
  std::string type = hi == kMaxInt ? "integer >= " + std::to_string(lo)
                                   : "integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  FieldSpec f{path, type, doc, [=](Settings& s, const ConfigNode& n) { acc(s) = read_int(n, lo, hi); },
              [=](const Settings& s) { return json(acc(s)); }};
  f.value_schema = integer_schema(lo, hi);
  return f;
}

// An integer where 0 is written "auto".
template <class Acc>
FieldSpec auto_int_field(std::string path, Acc acc, int64_t lo, int64_t hi, std::string doc) {
  FieldSpec f = int_field(path, acc, lo, hi, doc);
  f.type = "auto | " + f.type;
  f.read = [=](Settings& s, const ConfigNode& n) {
    if (n.kind == ConfigNode::Kind::kScalar && n.scalar == "auto") acc(s) = 0;
    else acc(s) = read_int(n, lo, hi);
  };
  f.write = [=](const Settings& s) { return acc(s) == 0 ? json("auto") : json(acc(s)); };
  f.value_schema = word_or("auto", f.value_schema);
  return f;
}

template <class Acc>
FieldSpec float_field(std::string path, Acc acc, FloatRange r, std::string doc) {
  FieldSpec f{path, r.str().empty() ? "number" : "number " + r.str(), doc,
              [=](Settings& s, const ConfigNode& n) { acc(s) = read_float(n, r); },
              [=](const Settings& s) { return json(acc(s)); }};
  f.value_schema = r.schema();
  return f;
}

// A positive number where 0 is written as a word (e.g. "dynamic").
template <class Acc>
FieldSpec auto_float_field(std::string path, Acc acc, std::string word, FloatRange r, std::string doc) {
  FieldSpec f = float_field(path, acc, r, doc);
  f.type = word + " | " + f.type;
  f.read = [=](Settings& s, const ConfigNode& n) {
    acc(s) = n.kind == ConfigNode::Kind::kScalar && n.scalar == word ? 0.0 : read_float(n, r);
  };
  f.write = [=](const Settings& s) { return acc(s) == 0.0 ? json(word) : json(acc(s)); };
  f.value_schema = word_or(word, f.value_schema);
  return f;
}

// A fixed-length list of numbers (a std::array<double, N> in Settings): [a, b], [a, b, c].
template <class Acc>
FieldSpec float_list_field(std::string path, Acc acc, FloatRange r, std::string doc) {
  constexpr size_t n = std::tuple_size_v<std::remove_reference_t<decltype(acc(std::declval<Settings&>()))>>;
  const std::string shape = n == 2 ? "[a, b]" : "[a, b, c]";
  FieldSpec f{path, shape + (r.str().empty() ? " of numbers" : ", each " + r.str()), doc,
              [=](Settings& s, const ConfigNode& node) {
                if (node.kind != ConfigNode::Kind::kSequence || node.items.size() != n)
                  throw FieldProblem{"expected a list of " + std::string(n == 2 ? "two" : "three") + " numbers, got " +
                                         node.kind_name(),
                                     "write it as " + shape};
                for (size_t i = 0; i < n; ++i) acc(s)[i] = read_float(node.items[i], r);
              },
              [=](const Settings& s) {
                json out = json::array();
                for (double v : acc(s)) out.push_back(v);
                return out;
              }};
  f.value_schema = {{"type", "array"}, {"items", r.schema()}, {"minItems", n}, {"maxItems", n}};
  return f;
}

template <class Acc>
FieldSpec bool_field(std::string path, Acc acc, std::string doc) {
  FieldSpec f{path, "true | false", doc, [=](Settings& s, const ConfigNode& n) { acc(s) = read_bool(n); },
              [=](const Settings& s) { return json(acc(s)); }};
  f.value_schema = {{"type", "boolean"}};
  return f;
}

template <class Acc>
FieldSpec string_field(std::string path, Acc acc, std::string doc) {
  FieldSpec f{path, "string", doc, [=](Settings& s, const ConfigNode& n) { acc(s) = read_string(n); },
              [=](const Settings& s) { return json(acc(s)); }};
  f.value_schema = kStringSchema;
  return f;
}

// A file path: relative paths are taken relative to the recipe file that
// names them (or to the current directory for --set and built-in recipes).
std::string resolve_path(const ConfigNode& n) {
  std::filesystem::path p = read_string(n);
  if (!p.empty() && p.is_relative() && n.origin.line > 0) p = std::filesystem::path(n.origin.file).parent_path() / p;
  return p.empty() ? "" : std::filesystem::absolute(p).lexically_normal().string();
}

template <class Acc>
FieldSpec path_field(std::string path, Acc acc, std::string doc) {
  FieldSpec f{path, "path", doc, [=](Settings& s, const ConfigNode& n) { acc(s) = resolve_path(n); },
              [=](const Settings& s) { return json(acc(s)); }};
  f.value_schema = kStringSchema;
  return f;
}

// A path, or one of a few words that are not paths (checkpoint.resume: auto | never).
template <class Acc>
FieldSpec word_or_path_field(std::string path, Acc acc, std::vector<std::string> words, std::string doc) {
  std::string type;
  for (const auto& w : words) type += w + " | ";
  FieldSpec f{path, type + "path", doc,
              [=](Settings& s, const ConfigNode& n) {
                const std::string& v = read_string(n);
                const bool word = std::find(words.begin(), words.end(), v) != words.end();
                if (!word && v.empty()) throw FieldProblem{"is empty", "write " + type + "a directory"};
                acc(s) = word ? v : resolve_path(n);
              },
              [=](const Settings& s) { return json(acc(s)); }};
  f.value_schema = {{"type", "string"}, {"minLength", 1}, {"examples", words}};
  return f;
}

// A duration in seconds, written as a number of seconds, "90m", "3h50m",
// "1h2m3s" or "HH:MM:SS"; 0 = none.
double read_duration(const ConfigNode& n) {
  const std::string& s = scalar_of(n, "a duration");
  const FieldProblem bad{"'" + s + "' is not a duration", "write seconds (5400), 90m, 3h50m or 03:50:00"};
  double v = 0;
  if (parse_double(s, v)) {
    if (v < 0) throw bad;
    return v;
  }
  if (s.find(':') != std::string::npos) {  // [[HH:]MM:]SS
    double total = 0;
    size_t start = 0, parts = 0;
    for (;;) {
      const size_t colon = s.find(':', start);
      double part = 0;
      if (!parse_double(s.substr(start, colon - start), part) || part < 0) throw bad;
      total = total * 60 + part, ++parts;
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    if (parts > 3) throw bad;
    return total;
  }
  double total = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
    double amount = 0;
    if (j == i || j == s.size() || !parse_double(s.substr(i, j - i), amount)) throw bad;
    const char unit = s[j];
    const double scale = unit == 'h' ? 3600 : unit == 'm' ? 60 : unit == 's' ? 1 : unit == 'd' ? 86400 : -1;
    if (scale < 0) throw bad;
    total += amount * scale;
    i = j + 1;
  }
  return total;
}

std::string format_duration_key(double seconds) {
  if (seconds == 0) return "0";
  const auto whole = static_cast<int64_t>(seconds);
  if (static_cast<double>(whole) != seconds) return json(seconds).dump();
  std::string out;
  if (whole >= 3600) out += std::to_string(whole / 3600) + "h";
  if (whole % 3600 >= 60) out += std::to_string(whole % 3600 / 60) + "m";
  if (whole % 60 != 0) out += std::to_string(whole % 60) + "s";
  return out;
}

template <class Acc>
FieldSpec duration_field(std::string path, Acc acc, std::string doc) {
  FieldSpec f{path, "duration (seconds, 90m, 3h50m, HH:MM:SS)", doc,
              [=](Settings& s, const ConfigNode& n) { acc(s) = read_duration(n); },
              [=](const Settings& s) { return json(format_duration_key(acc(s))); }};
  // The patterns read_duration takes: 1h2m3s (units d, h, m, s) or [[HH:]MM:]SS.
  f.value_schema = {
      {"anyOf", json::array({{{"type", "number"}, {"minimum", 0}},
                             {{"type", "string"},
                              {"pattern", "^([0-9]+(\\.[0-9]*)?|([0-9.]+[dhms])+|[0-9.]+(:[0-9.]+){1,2})$"}}})}};
  return f;
}

// A list of signal names (SIGTERM or TERM), each one gputrain can catch.
template <class Acc>
FieldSpec signal_list_field(std::string path, Acc acc, std::string doc) {
  std::string names;
  for (const auto& n : catchable_signal_names()) names += (names.empty() ? "" : ", ") + n;
  FieldSpec f{path, "[signal, ...]", doc,
              [=](Settings& s, const ConfigNode& n) {
                std::vector<const ConfigNode*> items;
                if (n.kind == ConfigNode::Kind::kSequence)
                  for (const auto& item : n.items) items.push_back(&item);
                else items.push_back(&n);
                std::vector<std::string> out;
                for (const ConfigNode* item : items) {
                  std::string name = read_string(*item);
                  for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
                  if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
                  if (signal_number(name) == 0)
                    throw FieldProblem{
                        "'" + item->scalar + "' is not a signal gputrain can catch",
                        "use some of " + names + " (SIGINT always interrupts; SIGKILL cannot be caught)"};
                  if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
                }
                acc(s) = std::move(out);
              },
              [=](const Settings& s) { return json(acc(s)); }};
  f.value_schema = one_or_list(kStringSchema);
  return f;
}

// One path or a list of them (each may be a glob pattern); one path is
// written back as a plain string so simple recipes stay simple.
template <class Acc>
FieldSpec path_list_field(std::string path, Acc acc, std::string doc) {
  FieldSpec f{path, "path | [path, ...]", doc,
              [=](Settings& s, const ConfigNode& n) {
                std::vector<std::string> out;
                if (n.kind == ConfigNode::Kind::kSequence) {
                  if (n.items.empty()) throw FieldProblem{"is an empty list", "name at least one file or pattern"};
                  for (const auto& item : n.items) out.push_back(resolve_path(item));
                } else if (std::string p = resolve_path(n); !p.empty()) {
                  out.push_back(p);
                }
                acc(s) = std::move(out);
              },
              [=](const Settings& s) {
                const auto& v = acc(s);
                if (v.empty()) return json("");
                if (v.size() == 1) return json(v.front());
                return json(v);
              }};
  f.value_schema = one_or_list(kStringSchema);
  return f;
}

// data.*.mixture: a list of {path: path | [path, ...], weight: number > 0}.
template <class Acc>
FieldSpec mixture_field(std::string path, Acc acc, std::string doc) {
  FieldSpec f{
      path, "[{path: path | [path, ...], weight: number > 0}, ...]", doc,
      [=](Settings& s, const ConfigNode& n) {
        std::vector<MixtureSourceSettings> out;
        if (n.kind == ConfigNode::Kind::kNull) return void(acc(s) = out);
        if (n.kind != ConfigNode::Kind::kSequence)
          throw FieldProblem{"expected a list of sources, got " + n.kind_name(),
                             "write - {path: data/a/train_*.bin, weight: 0.7} for each source"};
        for (size_t i = 0; i < n.items.size(); ++i) {
          const ConfigNode& item = n.items[i];
          const std::string at = "source " + std::to_string(i + 1);
          if (item.kind != ConfigNode::Kind::kMap)
            throw FieldProblem{at + " is " + item.kind_name() + ", not {path: ..., weight: ...}",
                               "write each source as {path: FILES, weight: W}"};
          MixtureSourceSettings m;
          for (const auto& e : item.entries) {
            if (e.key == "path") {
              if (e.value.kind == ConfigNode::Kind::kSequence) {
                for (const auto& p : e.value.items) m.paths.push_back(resolve_path(p));
              } else {
                m.paths.push_back(resolve_path(e.value));
              }
            } else if (e.key == "weight") {
              m.weight = read_float(e.value, FloatRange{0.0, INFINITY, true, false});
            } else {
              throw FieldProblem{at + " has the unknown key '" + e.key + "'",
                                 "a source has path and weight; the other data keys apply to all sources"};
            }
          }
          if (m.paths.empty() || m.paths.front().empty())
            throw FieldProblem{at + " has no path", "give each source its files: {path: FILES, weight: W}"};
          if (!item.find("weight"))
            throw FieldProblem{at + " has no weight", "give each source its share: {path: FILES, weight: W}"};
          out.push_back(std::move(m));
        }
        acc(s) = std::move(out);
      },
      [=](const Settings& s) {
        json out = json::array();
        for (const auto& m : acc(s))
          out.push_back({{"path", m.paths.size() == 1 ? json(m.paths.front()) : json(m.paths)}, {"weight", m.weight}});
        return out;
      }};
  const json source = {
      {"type", "object"},
      {"properties",
       {{"path", one_or_list(kStringSchema)}, {"weight", FloatRange{0.0, INFINITY, true, false}.schema()}}},
      {"required", json::array({"path", "weight"})},
      {"additionalProperties", false}};
  f.value_schema = {{"type", json::array({"array", "null"})}, {"items", source}};
  return f;
}

// An integer id where "auto" (stored as -1) means "find it elsewhere".
template <class Acc>
FieldSpec auto_id_field(std::string path, Acc acc, int64_t hi, std::string doc) {
  FieldSpec f{path, "auto | integer in [0, " + std::to_string(hi) + "]", doc,
              [=](Settings& s, const ConfigNode& n) {
                acc(s) = n.kind == ConfigNode::Kind::kScalar && n.scalar == "auto" ? -1 : read_int(n, 0, hi);
              },
              [=](const Settings& s) { return acc(s) < 0 ? json("auto") : json(acc(s)); }};
  f.value_schema = word_or("auto", integer_schema(0, hi));
  return f;
}

template <class Acc, class E>
FieldSpec enum_field(std::string path, Acc acc, EnumTable<E> table, std::string doc) {
  FieldSpec f{path, enum_choices(table), doc, [=](Settings& s, const ConfigNode& n) { acc(s) = read_enum(n, table); },
              [=](const Settings& s) { return json(enum_name(table, acc(s))); }};
  f.value_schema = enum_schema(table);
  return f;
}

// A list of enum values (one value alone is a list of one); no repeats, not empty.
template <class Acc, class E>
FieldSpec enum_list_field(std::string path, Acc acc, EnumTable<E> table, std::string doc) {
  FieldSpec f{path, "[" + enum_choices(table) + ", ...]", doc,
              [=](Settings& s, const ConfigNode& n) {
                std::vector<E> out;
                if (n.kind == ConfigNode::Kind::kSequence) {
                  if (n.items.empty())
                    throw FieldProblem{"is an empty list", "name at least one of " + enum_choices(table)};
                  for (const auto& item : n.items) {
                    const E v = read_enum(item, table);
                    if (std::find(out.begin(), out.end(), v) != out.end())
                      throw FieldProblem{"names '" + item.scalar + "' twice", "list each value once"};
                    out.push_back(v);
                  }
                } else {
                  out.push_back(read_enum(n, table));
                }
                acc(s) = std::move(out);
              },
              [=](const Settings& s) {
                json out = json::array();
                for (E v : acc(s)) out.push_back(enum_name(table, v));
                return out;
              }};
  f.value_schema = one_or_list(enum_schema(table), /*unique=*/true);
  return f;
}

const EnumTable<DataFormat> kFormats = {{"none", DataFormat::kNone},
                                        {"synthetic", DataFormat::kSynthetic},
                                        {"tokens", DataFormat::kTokens},
                                        {"text", DataFormat::kText},
                                        {"preference", DataFormat::kPreference}};

void add_data_source(std::vector<FieldSpec>& f, const std::string& which) {
  // data.train and data.eval share a shape; build their fields from one list.
  auto src = [which](auto& s) -> auto& { return which == "train" ? s.data.train : s.data.eval; };
  std::string p = "data." + which + ".";
  // What the training data is decides what the saved data position means: changing it is refused
  // (its path may move to another mount); the evaluation data only changes what is reported.
  const ResumePolicy on_resume = which == "train" ? ResumePolicy::kRefused : ResumePolicy::kReported;
  const ResumePolicy path_on_resume = which == "train" ? ResumePolicy::kDiverges : ResumePolicy::kReported;
  f.push_back(enum_field(
                  p + "format", [=](auto& s) -> auto& { return src(s).format; }, kFormats,
                  which == "train" ? "where training batches come from"
                                   : "where evaluation batches come from; none = no evaluation")
                  .resume(on_resume));
  f.push_back(
      path_list_field(
          p + "path", [=](auto& s) -> auto& { return src(s).paths; },
          "tokens/text: a file, a glob such as data/train_*.bin, or a list of them (relative to the recipe file); "
          "preference: the train_pairs.bin or val_pairs.bin `data prepare --format preference` wrote")
          .resume(path_on_resume));
  f.push_back(mixture_field(
                  p + "mixture", [=](auto& s) -> auto& { return src(s).mixture; },
                  "tokens: instead of path, sources sampled in proportion to their weights (docs/data.md "
                  "\"Mixtures\"); the other keys here apply to every source")
                  .resume(on_resume));
  f.push_back(enum_field(
                  p + "dtype", [=](auto& s) -> auto& { return src(s).dtype; },
                  EnumTable<TokenDtype>{
                      {"auto", TokenDtype::kAuto}, {"uint16", TokenDtype::kUint16}, {"uint32", TokenDtype::kUint32}},
                  "tokens: width of one little-endian token id; auto = from the llm.c header or the .json sidecar")
                  .resume(on_resume));
  f.push_back(float_list_field(
                  p + "span", [=](auto& s) -> auto& { return src(s).span; }, FloatRange{0.0, 1.0},
                  "tokens/text: the [start, end) fraction of the windows used (in file order), e.g. [0.9, 1.0] for a "
                  "held-out tail")
                  .resume(on_resume));
  f.push_back(enum_field(
                  p + "packing", [=](auto& s) -> auto& { return src(s).packing; },
                  EnumTable<Packing>{
                      {"stream", Packing::kStream}, {"documents", Packing::kDocuments}, {"padded", Packing::kPadded}},
                  "tokens: stream = fixed windows over the token stream; documents = windows start at a document and "
                  "hold whole documents (padding masked); padded = one document per window, the rest padding (as "
                  "unpacked fine-tuning batches are)")
                  .resume(on_resume));
  f.push_back(bool_field(
                  p + "mask_document_boundaries", [=](auto& s) -> auto& { return src(s).mask_document_boundaries; },
                  "tokens: no loss where the input is an end-of-document token with an earlier document before it in "
                  "the window")
                  .resume(on_resume));
  f.push_back(bool_field(
                  p + "document_attention", [=](auto& s) -> auto& { return src(s).document_attention; },
                  "tokens: each token attends only to earlier tokens of its own document (a document begins at "
                  "eot_token, and where a window begins), and positions restart at 0 there, as if each document "
                  "ran alone; with packing: documents, a window of many short documents trains as they would one "
                  "by one (docs/data.md, \"Packed documents\")")
                  .resume(on_resume));
  f.push_back(bool_field(
                  p + "shared_prompt", [=](auto& s) -> auto& { return src(s).shared_prompt; },
                  "preference: a pair is one row, its prompt computed once: the rejected completion follows the "
                  "chosen one, seeing the prompt and itself, its positions counting on from the prompt's end "
                  "(docs/preference.md, \"Batches\"); false = two rows, prompt + chosen and prompt + rejected, as TRL")
                  .resume(on_resume));
  f.push_back(bool_field(
                  p + "pack_pairs", [=](auto& s) -> auto& { return src(s).pack_pairs; },
                  "preference: a micro-batch's pairs one after another in rows of model.seq_len, without padding "
                  "between them, each seeing only itself (document attention); false = each pair (or each of its "
                  "two rows) padded to model.seq_len (docs/preference.md, \"Batches\")")
                  .resume(on_resume));
  f.push_back(
      auto_id_field(
          p + "eot_token", [=](auto& s) -> auto& { return src(s).eot_token; }, (1 << 24) - 1,
          "tokens: the id that starts each document (GPT-2's end-of-text, or a BOS) for packing and masking; auto = "
          "from the shards' .json sidecar")
          .resume(on_resume));
  std::string q = p + "synthetic.";
  f.push_back(enum_field(
                  q + "kind", [=](auto& s) -> auto& { return src(s).synthetic.kind; },
                  EnumTable<SyntheticKind>{{"markov", SyntheticKind::kMarkov}, {"uniform", SyntheticKind::kUniform}},
                  "markov = learnable language with a known entropy floor; uniform = random tokens (speed tests)")
                  .resume(on_resume));
  f.push_back(int_field(
                  q + "vocab", [=](auto& s) -> auto& { return src(s).synthetic.vocab; }, 0, kMaxInt,
                  "token ids the language uses; 0 = model.vocab_size")
                  .resume(on_resume));
  f.push_back(int_field(
                  q + "order", [=](auto& s) -> auto& { return src(s).synthetic.order; }, 1, 8,
                  "markov: how many previous tokens decide the next one")
                  .resume(on_resume));
  f.push_back(int_field(
                  q + "branching", [=](auto& s) -> auto& { return src(s).synthetic.branching; }, 1, 65536,
                  "markov: possible successors of each context")
                  .resume(on_resume));
  f.push_back(int_field(
                  q + "seed", [=](auto& s) -> auto& { return src(s).synthetic.seed; }, 0, kMaxInt,
                  "markov: which language (transition table); train and eval must match to be meaningful")
                  .resume(on_resume));
}

void add_run_fields(std::vector<FieldSpec>& f) {
  f.push_back(
      string_field(KEY(run.name), "run name; the default output_dir is runs/<name>").resume(ResumePolicy::kReported));
  f.push_back(string_field(KEY(run.output_dir),
                           "where metrics and the resolved recipe go (relative to the current directory); default "
                           "runs/<name>; one run writes there at a time (docs/run-folders.md)")
                  .resume(ResumePolicy::kReported));
  f.push_back(
      int_field(KEY(run.seed), 0, kMaxInt, "seeds weight init, dropout and data order").resume(ResumePolicy::kRefused));
  f.push_back(string_field(KEY(run.device), "auto | cpu | cuda | cuda:N; auto = CUDA when LibTorch sees a GPU")
                  .resume(ResumePolicy::kReported));
  f.push_back(auto_int_field(KEY(run.threads), 1, 4096, "CPU threads for ATen ops; auto = cores this process may use")
                  .resume(ResumePolicy::kReported));
  f.push_back(auto_int_field(KEY(run.memory_budget_mb), 1, kMaxInt,
                             "CPU: memory the batch size finder may plan for; auto = 80% of available RAM")
                  .resume(ResumePolicy::kReported));
  f.push_back(bool_field(KEY(run.cpu_malloc_cache),
                         "host memory: keep freed CPU tensor blocks of 128 KiB or more for reuse, for one step at most "
                         "(no page faults per step); false = each goes back to the OS when freed")
                  .resume(ResumePolicy::kReported));
}

// model.lora.* and model.moe.*: the adapters and the mixture of experts (resume as add_model_fields says).
void add_adapter_and_expert_fields(std::vector<FieldSpec>& f) {
  f.push_back(int_field(KEY(model.lora.rank), 0, 4096,
                        "LoRA: adapters of this rank on model.lora.targets, every other weight frozen (no gradients, "
                        "no optimizer state); 0 = off")
                  .resume(ResumePolicy::kRefused));
  f.push_back(
      float_field(KEY(model.lora.alpha), FloatRange{0, INFINITY, true}, "LoRA: the update is scaled by alpha / rank")
          .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(model.lora.dropout), FloatRange{0, 1, false, true},
                          "LoRA: dropout on the adapters' input (training only)"));
  f.push_back(enum_list_field(KEY(model.lora.targets),
                              EnumTable<LoraTarget>{{"qkv", LoraTarget::kQkv},
                                                    {"proj", LoraTarget::kProj},
                                                    {"mlp_up", LoraTarget::kMlpUp},
                                                    {"mlp_down", LoraTarget::kMlpDown}},
                              "LoRA: the layers adapted in every block: qkv = attn.c_attn, proj = attn.c_proj, mlp_up "
                              "= mlp.c_fc (SwiGLU: gate and up), mlp_down = mlp.c_proj")
                  .resume(ResumePolicy::kRefused));
  f.push_back(enum_field(KEY(model.lora.save),
                         EnumTable<LoraSave>{{"adapters", LoraSave::kAdapters}, {"full", LoraSave::kFull}},
                         "LoRA: checkpoints hold the adapters only (the frozen base is model.init_from, checked on "
                         "resume) or every weight"));
  f.push_back(
      enum_field(KEY(model.quantize.base),
                 EnumTable<QuantBase>{{"none", QuantBase::kNone}, {"nf4", QuantBase::kNf4}, {"fp4", QuantBase::kFp4}},
                 "QLoRA: the frozen base's block Linears (attention and MLP) stored in 4 bits as bitsandbytes "
                 "stores them (nf4 = NormalFloat4, fp4) and dequantized per layer in the compute dtype; "
                 "embeddings, head and norms stay as they are; needs model.lora.rank > 0; a bitsandbytes 4-bit "
                 "model.init_from folder sets it (and double_quant) from its config.json, its codes read as stored")
          .resume(ResumePolicy::kRefused));
  f.push_back(bool_field(KEY(model.quantize.double_quant),
                         "QLoRA: each block's absmax quantized again to 8 bits in blocks of 256 (about 4.13 bits a "
                         "weight instead of 4.5)")
                  .resume(ResumePolicy::kRefused));
  f.push_back(int_field(KEY(model.quantize.block_size), 32, 4096,
                        "QLoRA: weights sharing one absmax, one of bitsandbytes' sizes: 32, 64, ..., 4096")
                  .resume(ResumePolicy::kRefused));
  f.push_back(
      int_field(KEY(model.moe.experts), 0, 1024, "mixture of experts: expert MLPs per mixture layer; 0 = dense MLPs")
          .resume(ResumePolicy::kRefused));
  f.push_back(int_field(KEY(model.moe.top_k), 1, 64, "mixture of experts: experts each token is routed to")
                  .resume(ResumePolicy::kRefused));
  f.push_back(int_field(KEY(model.moe.every), 1, 1024,
                        "mixture of experts: every k-th block's MLP is a mixture (blocks k-1, 2k-1, ...); 1 = all")
                  .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(model.moe.capacity_factor), FloatRange{0, INFINITY},
                          "mixture of experts: each expert takes at most ceil(factor x tokens x top_k / experts) "
                          "tokens of a micro-batch, the rest are dropped (counted in metrics); 0 = no limit"));
  f.push_back(float_field(KEY(model.moe.aux_loss_coef), FloatRange{0, INFINITY},
                          "mixture of experts: weight of the load-balancing loss (Switch Transformer: experts x sum of "
                          "routed fraction x mean probability; 1 when balanced)"));
  f.push_back(enum_field(KEY(model.moe.balance),
                         EnumTable<MoeBalance>{{"aux_loss", MoeBalance::kAuxLoss}, {"bias", MoeBalance::kBias}},
                         "mixture of experts: aux_loss = the load-balancing loss (model.moe.aux_loss_coef); bias = "
                         "DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias added to the routing "
                         "probabilities to choose the top_k only, moved after each step by bias_rate toward the "
                         "experts below the mean load (summed over every rank)"));
  f.push_back(float_field(KEY(model.moe.bias_rate), FloatRange{0, 1},
                          "mixture of experts, balance: bias: each step's move of an expert's routing bias"));
}

void add_model_fields(std::vector<FieldSpec>& f) {
  // Resume: the model's shape is refused (the saved tensors depend on it). Dropout, attention, LoRA's
  // dropout and what it saves, and the mixture layers' capacity and balancing (weight, method, bias rate)
  // change the numbers from here on, not what the tensors mean, so they diverge (an adapters-only checkpoint checks its
  // base by fingerprint, whatever model.init_from now says: reported).
  f.push_back(
      enum_field(KEY(model.arch),
                 EnumTable<ModelArch>{{"gpt", ModelArch::kGpt},
                                      {"llama", ModelArch::kLlama},
                                      {"qwen2", ModelArch::kQwen2},
                                      {"mistral", ModelArch::kMistral}},
                 "gpt = GPT-2 style decoder (pre-LayerNorm, GELU MLP, learned positions); llama = RMSNorm, "
                 "rotary positions, SwiGLU MLP, and unless set otherwise bias: false and tie_embeddings: false; "
                 "qwen2 = llama with biases on q/k/v only; mistral = llama with model.sliding_window. With a "
                 "Hugging Face model.init_from, auto from its config.json (docs/finetune-hf.md)")
          .resume(ResumePolicy::kRefused));
  f.push_back(int_field(KEY(model.vocab_size), 2, 1 << 24, "embedding rows; token ids must be below it")
                  .resume(ResumePolicy::kRefused));
  f.push_back(
      int_field(KEY(model.seq_len), 1, 1 << 20, "context length (tokens per sequence)").resume(ResumePolicy::kRefused));
  f.push_back(int_field(KEY(model.n_layer), 1, 1024, "transformer blocks").resume(ResumePolicy::kRefused));
  f.push_back(
      int_field(KEY(model.n_head), 1, 1024, "attention heads; must divide d_model").resume(ResumePolicy::kRefused));
  f.push_back(int_field(KEY(model.d_model), 1, 1 << 16, "hidden size").resume(ResumePolicy::kRefused));
  f.push_back(auto_int_field(KEY(model.n_kv_head), 1, 1024,
                             "key/value heads (grouped-query attention; llama only): must divide n_head; auto = n_head")
                  .resume(ResumePolicy::kRefused));
  f.push_back(
      float_field(
          KEY(model.mlp_ratio), FloatRange{0, 64, true},
          "MLP hidden size = mlp_ratio * d_model (gpt); llama's SwiGLU: 2/3 of that, rounded up to a multiple of 64")
          .resume(ResumePolicy::kRefused));
  f.push_back(
      auto_int_field(KEY(model.mlp_width), 1, 1 << 20, "MLP hidden size, overriding mlp_ratio; auto = from mlp_ratio")
          .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(model.norm_eps), FloatRange{0, 1, true, true},
                          "epsilon of the LayerNorms (gpt) or RMSNorms (llama)")
                  .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(model.rope_theta), FloatRange{0, INFINITY, true},
                          "llama: base of the rotary position embedding's frequencies")
                  .resume(ResumePolicy::kRefused));
  f.push_back(enum_field(KEY(model.rope_scaling.type),
                         EnumTable<RopeScalingType>{{"none", RopeScalingType::kNone},
                                                    {"linear", RopeScalingType::kLinear},
                                                    {"dynamic", RopeScalingType::kDynamic},
                                                    {"llama3", RopeScalingType::kLlama3},
                                                    {"yarn", RopeScalingType::kYarn}},
                         "rotary positions scaled past the pretraining context, as transformers' rope_type: linear "
                         "(positions / factor), dynamic (NTK base growth past max_positions), llama3 (Llama 3.1's "
                         "per-frequency blend), yarn; none = unscaled")
                  .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(model.rope_scaling.factor), FloatRange{0, INFINITY, true},
                          "rope scaling: how many times the pretraining context is stretched")
                  .resume(ResumePolicy::kRefused));
  f.push_back(auto_int_field(KEY(model.rope_scaling.original_max_positions), 1, 1 << 24,
                             "rope scaling (llama3, yarn): the pretraining context (original_max_position_embeddings)")
                  .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(model.rope_scaling.low_freq_factor), FloatRange{0, INFINITY, true},
                          "llama3 rope scaling: wavelengths above original_max_positions / this are divided by factor")
                  .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(model.rope_scaling.high_freq_factor), FloatRange{0, INFINITY, true},
                          "llama3 rope scaling: wavelengths below original_max_positions / this are kept")
                  .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(model.rope_scaling.beta_fast), FloatRange{0, INFINITY, true},
                          "yarn rope scaling: rotations that bound extrapolation")
                  .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(model.rope_scaling.beta_slow), FloatRange{0, INFINITY, true},
                          "yarn rope scaling: rotations that bound interpolation")
                  .resume(ResumePolicy::kRefused));
  f.push_back(auto_float_field(KEY(model.rope_scaling.attention_factor), "auto", FloatRange{0, INFINITY, true},
                               "yarn rope scaling: cos and sin are scaled by this; auto = 0.1 ln(factor) + 1")
                  .resume(ResumePolicy::kRefused));
  f.push_back(bool_field(KEY(model.rope_scaling.truncate),
                         "yarn rope scaling: round the blended range of dimensions to whole ones")
                  .resume(ResumePolicy::kRefused));
  f.push_back(
      auto_int_field(KEY(model.head_dim), 1, 4096,
                     "width of each attention head; auto = d_model / n_head (Mistral Nemo: 128 at d_model 5120)")
          .resume(ResumePolicy::kRefused));
  f.push_back(auto_int_field(KEY(model.max_positions), 1, 1 << 24,
                             "rotary positions: the model's position limit (config.json max_position_embeddings), "
                             "at least seq_len; exported as such; auto = seq_len")
                  .resume(ResumePolicy::kRefused));
  f.push_back(auto_int_field(KEY(model.sliding_window), 1, 1 << 24,
                             "mistral: each position attends to itself and the sliding_window - 1 before it; auto = "
                             "all earlier positions")
                  .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(model.dropout), FloatRange{0, 1, false, true},
                          "dropout after embeddings, attention and MLP (training only)"));
  f.push_back(bool_field(KEY(model.bias),
                         "biases in the Linear layers (LayerNorms always keep theirs); default false under arch llama")
                  .resume(ResumePolicy::kRefused));
  const EnumTable<Toggle> toggle = {{"auto", Toggle::kAuto}, {"true", Toggle::kOn}, {"false", Toggle::kOff}};
  f.push_back(enum_field(KEY(model.attention_bias), toggle,
                         "llama, mistral: biases on q, k, v and the output projection; auto = model.bias "
                         "(qwen2: q, k and v always have them, the output projection never)")
                  .resume(ResumePolicy::kRefused));
  f.push_back(
      enum_field(KEY(model.mlp_bias), toggle, "llama, mistral: biases in the MLP's Linear layers; auto = model.bias")
          .resume(ResumePolicy::kRefused));
  f.push_back(bool_field(KEY(model.tie_embeddings),
                         "output head shares the token embedding matrix; default false under arch llama")
                  .resume(ResumePolicy::kRefused));
  f.push_back(enum_field(KEY(model.attention),
                         EnumTable<AttentionImpl>{{"sdpa", AttentionImpl::kSdpa}, {"math", AttentionImpl::kMath}},
                         "sdpa = scaled_dot_product_attention (flash/efficient kernels on CUDA with fp16/bf16); math = "
                         "explicit softmax(QK^T)V, for reference"));
  f.push_back(int_field(KEY(model.pad_vocab_to_multiple_of), 0, 4096,
                        "round the embedding rows up to a multiple of this (64 suits tensor cores); 0 = no padding")
                  .resume(ResumePolicy::kRefused));
  f.push_back(path_field(KEY(model.init_from),
                         "start from these weights instead of random ones: a Hugging Face model folder (GPT-2, Llama, "
                         "Qwen2, Mistral: config.json gives model.arch and every shape key the recipe leaves out), a "
                         "single .safetensors file in such a layout, or a gputrain checkpoint directory (relative to "
                         "the recipe file); empty = random init")
                  .resume(ResumePolicy::kReported));
  add_adapter_and_expert_fields(f);
}

void add_data_fields(std::vector<FieldSpec>& f) {
  add_data_source(f, "train");
  add_data_source(f, "eval");
  f.push_back(int_field(KEY(data.num_workers), 0, 64,
                        "background threads preparing batches; 0 = prepare in the training thread")
                  .resume(ResumePolicy::kReported));
  f.push_back(int_field(KEY(data.prefetch), 1, 1024, "batches prepared ahead of the training step")
                  .resume(ResumePolicy::kReported));
  f.push_back(
      bool_field(KEY(data.pin_memory), "page-locked host batches and asynchronous copies to the GPU (CUDA only)")
          .resume(ResumePolicy::kReported));
}

// train.preference: TRL's names and defaults (DPOConfig, ORPOConfig, CPOConfig); each objective
// reads only some of them (objective/objectives.h), and a key set for another one is an error.
void add_preference_fields(std::vector<FieldSpec>& f) {
  f.push_back(float_field(KEY(train.preference.beta), FloatRange{0, INFINITY, true},
                          "dpo: the KL penalty's weight (IPO: its tau); orpo: the odds-ratio term's weight (lambda); "
                          "simpo: the reward scale (the paper uses 2 to 10)"));
  f.push_back(enum_field(KEY(train.preference.loss),
                         EnumTable<PreferenceLoss>{{"sigmoid", PreferenceLoss::kSigmoid},
                                                   {"ipo", PreferenceLoss::kIpo},
                                                   {"hinge", PreferenceLoss::kHinge},
                                                   {"robust", PreferenceLoss::kRobust}},
                         "dpo: the loss of the reward margin, as TRL's loss_type: sigmoid (DPO), ipo (per-token "
                         "margins), hinge (SLiC), robust (rDPO, with label_smoothing)"));
  f.push_back(float_field(KEY(train.preference.label_smoothing), FloatRange{0, 0.5, false, true},
                          "dpo with loss robust, simpo: the probability that a pair's preference is flipped"));
  f.push_back(enum_field(KEY(train.preference.reference),
                         EnumTable<PreferenceReference>{{"auto", PreferenceReference::kAuto},
                                                        {"model", PreferenceReference::kModel},
                                                        {"precomputed", PreferenceReference::kPrecomputed}},
                         "dpo: the reference model; auto = the base with the LoRA adapters off under model.lora (no "
                         "second model), else a frozen copy of the starting weights; model = that copy even under "
                         "LoRA; precomputed = auto's log-probabilities of every pair, computed once before training "
                         "and stored in the run's reference_logps/ (no reference forward per step, the copy freed)")
                  .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(train.preference.simpo_gamma), FloatRange{0},
                          "simpo: the target reward margin gamma (TRL's simpo_gamma)"));
  f.push_back(float_field(KEY(train.preference.sft_weight), FloatRange{0},
                          "simpo: weight of the chosen completions' next-token loss added to SimPO's (TRL CPO's "
                          "cpo_alpha); 0 = pure SimPO"));
}

void add_train_fields(std::vector<FieldSpec>& f) {
  f.push_back(enum_field(KEY(train.objective),
                         EnumTable<TrainObjective>{{"causal_lm", TrainObjective::kCausalLm},
                                                   {"lm", TrainObjective::kCausalLm},
                                                   {"dpo", TrainObjective::kDpo},
                                                   {"orpo", TrainObjective::kOrpo},
                                                   {"simpo", TrainObjective::kSimpo}},
                         "what the step minimizes: causal_lm (or lm) = next-token cross-entropy over the targets that "
                         "take loss, divided by their count on every replica; dpo, orpo, simpo = preference alignment "
                         "on pairs (data format preference, train.preference; docs/preference.md)"));
  add_preference_fields(f);
  f.push_back(auto_int_field(KEY(train.per_device_batch_size), 1, 1 << 20,
                             "sequences per micro-batch; auto = the largest that fits (needs train.global_batch_size)")
                  .resume(ResumePolicy::kBatchSplit));
  f.push_back(int_field(KEY(train.global_batch_size), 0, 1 << 24,
                        "sequences per optimizer step, all processes together; needed when per_device_batch_size is "
                        "auto (grad_accum_steps follows); 0 = unset"));
  f.push_back(int_field(KEY(train.grad_accum_steps), 1, 1 << 20, "micro-batches accumulated per optimizer step")
                  .resume(ResumePolicy::kBatchSplit));
  f.push_back(int_field(KEY(train.max_steps), 1, kMaxInt, "optimizer steps to run").resume(ResumePolicy::kReported));
  f.push_back(
      int_field(KEY(train.log_every), 1, kMaxInt, "steps between metrics lines").resume(ResumePolicy::kReported));
  f.push_back(
      int_field(KEY(train.eval_every), 0, kMaxInt, "steps between evaluations; 0 = only at the end (needs data.eval)")
          .resume(ResumePolicy::kReported));
  f.push_back(int_field(KEY(train.eval_steps), 1, kMaxInt, "batches per evaluation (the same batches every time)")
                  .resume(ResumePolicy::kReported));
  f.push_back(bool_field(KEY(train.eval_full),
                         "evaluate on every window of data.eval once (the whole set, as `gputrain eval` does) "
                         "instead of train.eval_steps batches")
                  .resume(ResumePolicy::kReported));
  f.push_back(
      float_field(KEY(train.max_grad_norm), FloatRange{0}, "clip the global gradient norm to this; 0 = no clipping"));
  f.push_back(enum_field(KEY(train.gradient_checkpointing),
                         EnumTable<CheckpointingPolicy>{{"none", CheckpointingPolicy::kNone},
                                                        {"full", CheckpointingPolicy::kFull},
                                                        {"selective", CheckpointingPolicy::kSelective}},
                         "recompute transformer blocks in backward instead of keeping their activations: full = every "
                         "block, selective = every checkpoint_every-th"));
  f.push_back(
      int_field(KEY(train.checkpoint_every), 1, 1024, "selective checkpointing: recompute blocks 0, k, 2k, ..."));
  f.push_back(
      int_field(KEY(train.empty_cache_steps), 0, kMaxInt,
                "every N steps release cached allocator memory (CUDA caching allocator; malloc_trim on CPU); 0 = never")
          .resume(ResumePolicy::kReported));
  f.push_back(enum_field(KEY(train.nan_policy),
                         EnumTable<NanPolicy>{
                             {"abort", NanPolicy::kAbort}, {"skip", NanPolicy::kSkip}, {"warn", NanPolicy::kWarn}},
                         "a step whose loss or gradient norm is inf/nan: abort = stop (exit 1, the first bad gradient "
                         "named); skip = drop the update; warn = apply it and warn")
                  .resume(ResumePolicy::kReported));
  f.push_back(
      enum_field(KEY(train.spike_policy),
                 EnumTable<SpikePolicy>{
                     {"off", SpikePolicy::kOff}, {"skip", SpikePolicy::kSkip}, {"rollback", SpikePolicy::kRollback}},
                 "a finite loss spike (loss or gradient norm over train.spike_threshold deviations above the "
                 "last train.spike_window steps): skip = drop the update; rollback = restore the last "
                 "checkpoint's weights and optimizer state, the data read since skipped")
          .resume(ResumePolicy::kReported));
  f.push_back(int_field(KEY(train.spike_window), 2, kMaxInt,
                        "accepted steps whose loss and gradient norm the spike guard compares each step with (judged "
                        "once that many were seen)")
                  .resume(ResumePolicy::kReported));
  f.push_back(float_field(KEY(train.spike_threshold), FloatRange{0, INFINITY, true},
                          "standard deviations above the window's mean that make a step a spike")
                  .resume(ResumePolicy::kReported));
  f.push_back(int_field(KEY(train.spike_max_rollbacks), 0, 1000000,
                        "spike_policy rollback: the run stops (exit 1) at the spike after this many rollbacks")
                  .resume(ResumePolicy::kReported));
}

void add_precision_fields(std::vector<FieldSpec>& f) {
  f.push_back(enum_field(KEY(precision.mode),
                         EnumTable<PrecisionMode>{{"fp32", PrecisionMode::kFp32},
                                                  {"tf32", PrecisionMode::kTf32},
                                                  {"bf16", PrecisionMode::kBf16},
                                                  {"fp16", PrecisionMode::kFp16},
                                                  {"bf16-pure", PrecisionMode::kBf16Pure}},
                         "fp32; tf32 (TF32 matmuls on Ampere+ GPUs); bf16 / fp16 = mixed precision (fp32 weights and "
                         "optimizer, autocast compute; fp16 with loss scaling); bf16-pure = bf16 weights, fp32 "
                         "optimizer state and update with stochastic rounding")
                  .resume(ResumePolicy::kWeightDtype));
  f.push_back(auto_float_field(KEY(precision.loss_scale), "dynamic", FloatRange{0, INFINITY, true},
                               "fp16: a fixed loss scale, or dynamic (grows and backs off on overflow)"));
  f.push_back(
      float_field(KEY(precision.init_scale), FloatRange{0, INFINITY, true}, "fp16 dynamic: the first loss scale"));
  f.push_back(float_field(KEY(precision.growth_factor), FloatRange{1, INFINITY, true},
                          "fp16 dynamic: scale multiplier after growth_interval clean steps"));
  f.push_back(float_field(KEY(precision.backoff_factor), FloatRange{0, 1, true, true},
                          "fp16 dynamic: scale multiplier after an overflow"));
  f.push_back(
      int_field(KEY(precision.growth_interval), 1, kMaxInt, "fp16 dynamic: clean steps before the scale grows"));
}

void add_kernels_fields(std::vector<FieldSpec>& f) {
  f.push_back(
      bool_field(
          KEY(kernels.cuda_graphs),
          "CUDA: capture the forward and backward of a step's micro-batches as one CUDA graph after 3 eager steps and "
          "replay it (one launch instead of hundreds); one process, no MoE or activation checkpointing")
          .resume(ResumePolicy::kReported));
}

void add_optim_fields(std::vector<FieldSpec>& f) {
  f.push_back(enum_field(KEY(optim.name),
                         EnumTable<OptimName>{{"adamw", OptimName::kAdamW},
                                              {"adamw8bit", OptimName::kAdamW8bit},
                                              {"adafactor", OptimName::kAdafactor},
                                              {"lion", OptimName::kLion},
                                              {"sgd", OptimName::kSgd},
                                              {"muon", OptimName::kMuon}},
                         "adamw (8 bytes of state per parameter); adamw8bit (block-wise 8-bit moments, ~2); adafactor "
                         "(factored second moment, ~0 for matrices); lion (sign update, 4); sgd (momentum, 4 or 0); "
                         "muon (orthogonalized momentum for the hidden matrices, 4; AdamW for the rest, 8)")
                  .resume(ResumePolicy::kRefused));
  f.push_back(enum_field(
      KEY(optim.impl),
      EnumTable<OptimImpl>{{"auto", OptimImpl::kAuto}, {"foreach", OptimImpl::kForeach}, {"fused", OptimImpl::kFused}},
      "foreach = multi-tensor ATen ops over all parameters; fused = our one-pass kernels (CUDA, and a C++ loop on CPU) "
      "for adamw and adamw8bit; auto = fused where it exists"));
  f.push_back(float_field(KEY(optim.lr), FloatRange{0, 10, true}, "peak learning rate"));
  f.push_back(float_list_field(KEY(optim.betas), FloatRange{0, 1, false, true}, "adamw, adamw8bit: [beta1, beta2]"));
  f.push_back(float_field(KEY(optim.eps), FloatRange{0, 1, true}, "adamw, adamw8bit: epsilon added to sqrt(v)"));
  f.push_back(float_field(KEY(optim.weight_decay), FloatRange{0, 10},
                          "weight decay of the decayed group (matrices): decoupled (p -= lr*wd*p) except sgd, where it "
                          "is L2 added to the gradient as in torch.optim.SGD"));
  f.push_back(bool_field(KEY(optim.decay_embeddings), "also decay the token and position embeddings"));
  f.push_back(int_field(KEY(optim.adamw8bit.min_8bit_size), 0, kMaxInt,
                        "tensors with fewer elements keep 32-bit moments (bitsandbytes' min_8bit_size)")
                  .resume(ResumePolicy::kRefused));
  f.push_back(
      bool_field(KEY(optim.adamw8bit.embeddings_32bit),
                 "keep 32-bit moments for the token and position embeddings (bitsandbytes' StableEmbedding advice)")
          .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(optim.adafactor.beta1), FloatRange{0, 1, false, true},
                          "first-moment decay; 0 = no momentum and no state for it")
                  .resume(ResumePolicy::kRefused));
  f.push_back(float_field(KEY(optim.adafactor.decay_rate), FloatRange{-1, 0, false, true},
                          "second-moment decay beta2_t = 1 - step^decay_rate"));
  f.push_back(
      float_field(KEY(optim.adafactor.clip_threshold), FloatRange{0, INFINITY, true}, "clip the update's RMS to this"));
  f.push_back(float_list_field(KEY(optim.adafactor.eps), FloatRange{0, 1, true},
                               "[added to grad^2, floor of the parameter scale]"));
  f.push_back(bool_field(KEY(optim.adafactor.scale_parameter), "multiply the lr by max(eps[1], RMS(parameter))"));
  f.push_back(bool_field(
      KEY(optim.adafactor.relative_step),
      "lr = min(1e-2, 1/sqrt(step)) (times the parameter scale); optim.lr and the schedule are then ignored"));
  f.push_back(float_list_field(KEY(optim.lion.betas), FloatRange{0, 1, false, true},
                               "[beta1 of the update's interpolation, beta2 of the momentum]"));
  f.push_back(
      float_field(KEY(optim.sgd.momentum), FloatRange{0, 1, false, true}, "momentum; 0 = plain SGD (no state)"));
  f.push_back(float_field(KEY(optim.sgd.dampening), FloatRange{0, 1}, "dampening of the momentum update"));
  f.push_back(bool_field(KEY(optim.sgd.nesterov), "Nesterov momentum (needs momentum > 0 and dampening 0)"));
  f.push_back(float_field(KEY(optim.muon.momentum), FloatRange{0, 1, false, true},
                          "muon: momentum of the matrices' gradient average (buf.lerp_(grad, 1 - momentum))"));
  f.push_back(bool_field(KEY(optim.muon.nesterov), "muon: orthogonalize grad.lerp(buf, momentum) instead of buf"));
  f.push_back(int_field(KEY(optim.muon.ns_steps), 1, 99, "muon: Newton-Schulz iterations per step"));
  f.push_back(float_list_field(KEY(optim.muon.ns_coefficients), FloatRange{},
                               "muon: the quintic Newton-Schulz iteration's [a, b, c]"));
  f.push_back(float_field(KEY(optim.muon.eps), FloatRange{0, 1, true},
                          "muon: floor of the update's norm before the iteration divides by it"));
  f.push_back(enum_field(
      KEY(optim.muon.adjust_lr),
      EnumTable<MuonAdjustLr>{{"original", MuonAdjustLr::kOriginal}, {"match_rms_adamw", MuonAdjustLr::kMatchRmsAdamW}},
      "muon: each matrix [A, B]'s lr: original = lr sqrt(max(1, A/B)) (Keller Jordan's); "
      "match_rms_adamw = lr 0.2 sqrt(max(A, B)) (Moonlight's: reuse an AdamW-tuned lr and decay)"));
  f.push_back(enum_field(
      KEY(optim.muon.ns_dtype),
      EnumTable<MuonIterationDtype>{{"bf16", MuonIterationDtype::kBf16}, {"fp32", MuonIterationDtype::kFp32}},
      "muon: the Newton-Schulz iteration in bfloat16 (torch.optim.Muon's) or float32"));
  f.push_back(float_field(KEY(optim.muon.adamw.lr), FloatRange{0, 10, true},
                          "muon: peak lr of the AdamW that updates embeddings, head, norms and biases (follows "
                          "optim.schedule as optim.lr does)"));
  f.push_back(float_list_field(KEY(optim.muon.adamw.betas), FloatRange{0, 1, false, true},
                               "muon: that AdamW's [beta1, beta2]"));
  f.push_back(float_field(KEY(optim.muon.adamw.eps), FloatRange{0, 1, true}, "muon: that AdamW's epsilon"));
  f.push_back(float_field(KEY(optim.muon.adamw.weight_decay), FloatRange{0, 10},
                          "muon: that AdamW's decoupled weight decay, of its matrices (an untied head; embeddings "
                          "with optim.decay_embeddings)"));
  f.push_back(enum_field(
      KEY(optim.schedule.name),
      EnumTable<ScheduleName>{
          {"constant", ScheduleName::kConstant}, {"cosine", ScheduleName::kCosine}, {"linear", ScheduleName::kLinear}},
      "learning-rate shape after warmup"));
  f.push_back(int_field(KEY(optim.schedule.warmup_steps), 0, kMaxInt, "linear warmup from lr/warmup_steps to lr"));
  f.push_back(
      float_field(KEY(optim.schedule.min_lr_ratio), FloatRange{0, 1}, "cosine/linear: final lr as a fraction of lr"));
  f.push_back(int_field(KEY(optim.schedule.decay_steps), 0, kMaxInt, "step where decay ends; 0 = train.max_steps")
                  .resume(ResumePolicy::kReported));
}

void add_parallel_fields(std::vector<FieldSpec>& f) {
  // Resume: a checkpoint's files join into the whole model and state (checkpoint/training_checkpoint.h),
  // and the data position is global, so dp, tp, pp, ep, cp and the ZeRO stage may change (dp as a batch
  // split; tp where the optimizer state is elementwise: checkpoint/tensor_parallel_state.h).
  f.push_back(auto_int_field(KEY(parallel.dp), 1, 65536, "data-parallel degree; auto = the number of processes")
                  .resume(ResumePolicy::kBatchSplit));
  f.push_back(int_field(KEY(parallel.tp), 1, 65536,
                        "tensor-parallel degree: attention heads and MLP columns split over this many adjacent ranks; "
                        "must divide model.n_head and the MLP width")
                  .resume(ResumePolicy::kReported));
  f.push_back(
      int_field(
          KEY(parallel.pp), 1, 65536,
          "pipeline-parallel degree: the blocks split into this many stages of balanced compute; at most model.n_layer")
          .resume(ResumePolicy::kReported));
  f.push_back(enum_field(KEY(parallel.pp_schedule),
                         EnumTable<PipelineSchedule>{{"1f1b", PipelineSchedule::kOneFOneB},
                                                     {"gpipe", PipelineSchedule::kGpipe}},
                         "pipeline schedule: 1f1b (a stage holds at most pp micro-batches' activations) or gpipe (all "
                         "forwards, then all backwards)")
                  .resume(ResumePolicy::kReported));
  f.push_back(int_field(KEY(parallel.pp_microbatches), 0, 65536,
                        "micro-batches per step through the pipeline: the step's grad_accum_steps x "
                        "per_device_batch_size sequences split into this many equal parts; 0 = grad_accum_steps")
                  .resume(ResumePolicy::kReported));
  f.push_back(
      int_field(KEY(parallel.ep), 1, 65536,
                "expert-parallel degree: each mixture layer's experts split over this many data-parallel ranks, tokens "
                "sent to their experts with all-to-all; must divide parallel.dp and model.moe.experts")
          .resume(ResumePolicy::kReported));
  f.push_back(int_field(KEY(parallel.cp), 1, 65536,
                        "context-parallel degree: each sequence split over this many ranks (adjacent, next to tp): "
                        "it is cut into 2 cp chunks and the rank at place r holds chunks r and 2 cp - 1 - r; every "
                        "layer but attention works on those tokens alone, attention gathers the keys and values of "
                        "the others; model.seq_len must divide by 2 cp")
                  .resume(ResumePolicy::kReported));
  f.push_back(
      enum_field(KEY(parallel.cp_method),
                 EnumTable<ContextMethod>{{"allgather", ContextMethod::kAllGather}, {"ring", ContextMethod::kRing}},
                 "cp > 1: how attention meets the other ranks' keys and values. allgather = gather them all "
                 "(one exchange per layer, every key and a [T / cp, T] mask held per rank); ring = pass them "
                 "round the cp group one rank's block at a time, each exchange overlapping the previous "
                 "block's attention, merged by exact log-sum-exp (no whole-sequence keys or mask held; slower "
                 "where no core is free to overlap; no attention dropout)")
          .resume(ResumePolicy::kReported));
  f.push_back(enum_field(KEY(parallel.backend),
                         EnumTable<CommBackend>{
                             {"auto", CommBackend::kAuto}, {"nccl", CommBackend::kNccl}, {"gloo", CommBackend::kGloo}},
                         "collectives library: auto = NCCL on CUDA, Gloo on the CPU")
                  .resume(ResumePolicy::kReported));
  f.push_back(float_field(KEY(parallel.bucket_mb), FloatRange{0, 4096, true},
                          "gradient all-reduce bucket size in MiB; a full bucket is sent while backward goes on")
                  .resume(ResumePolicy::kReported));
  f.push_back(int_field(KEY(parallel.zero), 0, 3,
                        "ZeRO stage: 0 = every rank holds everything; 1 = optimizer state sharded; 2 = gradients "
                        "too; 3 = weights too (fully sharded: each unit gathered only while in use)")
                  .resume(ResumePolicy::kReported));
  f.push_back(bool_field(KEY(parallel.reshard_after_forward),
                         "zero 3: free each unit's gathered weights after its forward and gather them again for "
                         "its backward, and compute the output head from each rank's vocabulary rows in turn "
                         "(false: keep units gathered until their backward and gather the head's weight whole: "
                         "more memory, less communication)")
                  .resume(ResumePolicy::kReported));
  f.push_back(
      enum_field(KEY(parallel.gather_dtype),
                 EnumTable<GatherDtype>{
                     {"auto", GatherDtype::kAuto}, {"weights", GatherDtype::kWeights}, {"bf16", GatherDtype::kBf16}},
                 "zero 3: the dtype each unit's weights are gathered and computed in; the fp32 shards, the "
                 "optimizer and the gradient reduction stay fp32. auto = bf16 under precision.mode bf16 (half "
                 "the traffic and gathered memory), else the weights' own; weights = always the weights' own")
          .resume(ResumePolicy::kReported));
  f.push_back(enum_field(KEY(parallel.offload_optimizer),
                         EnumTable<OptimizerOffload>{{"false", OptimizerOffload::kNone},
                                                     {"cpu", OptimizerOffload::kCpu},
                                                     {"nvme", OptimizerOffload::kNvme},
                                                     {"true", OptimizerOffload::kCpu}},
                         "where the optimizer state lives. false = with the weights; cpu (or true) = CUDA runs: the "
                         "state and the update in host memory (pinned); nvme = zero 3: the state in files under "
                         "parallel.offload_dir, streamed one unit at a time through the update (on the host); "
                         "with units gathered in bf16, the fp32 weight shards too (memory keeps bf16 copies)")
                  .resume(ResumePolicy::kReported));
  f.push_back(path_field(KEY(parallel.offload_dir),
                         "offload_optimizer nvme: the directory (on a local disk) for the state files, reserved "
                         "in full at start and removed at exit; empty = run.output_dir")
                  .resume(ResumePolicy::kReported));
  f.push_back(bool_field(KEY(parallel.offload_params),
                         "zero 3 on CUDA: keep each rank's weight shards (pinned), their gradients and the optimizer "
                         "state in host memory and run the update on the CPU; the GPU holds only the units in use "
                         "and the activations")
                  .resume(ResumePolicy::kReported));
  f.push_back(float_field(KEY(parallel.timeout_s), FloatRange{1, 86400},
                          "seconds a collective or the rendezvous may take before the run ends with an error")
                  .resume(ResumePolicy::kReported));
}

void add_checkpoint_fields(std::vector<FieldSpec>& f) {
  f.push_back(int_field(KEY(checkpoint.every), 0, kMaxInt,
                        "save a checkpoint every N steps; 0 = only when the run stops (checkpoint.at_end)")
                  .resume(ResumePolicy::kReported));
  f.push_back(int_field(KEY(checkpoint.keep_last), 0, kMaxInt,
                        "complete checkpoints to keep (older ones are deleted); 0 = keep all")
                  .resume(ResumePolicy::kReported));
  f.push_back(string_field(KEY(checkpoint.dir),
                           "where checkpoints go (relative to the current directory); default "
                           "<output_dir>/checkpoints; locked by the run like output_dir")
                  .resume(ResumePolicy::kReported));
  f.push_back(word_or_path_field(KEY(checkpoint.resume), {"auto", "never"},
                                 "auto = continue from the newest complete checkpoint in checkpoint.dir, if any; never "
                                 "= start fresh; or a checkpoint directory to continue from")
                  .resume(ResumePolicy::kReported));
  f.push_back(
      bool_field(KEY(checkpoint.at_end),
                 "save when the run finishes its max_steps (a preempted, interrupted or out-of-time run always saves)")
          .resume(ResumePolicy::kReported));
  f.push_back(bool_field(KEY(checkpoint.async),
                         "copy the checkpoint to host memory and write it on a background thread while training "
                         "goes on (the next save, a rollback and the run's end wait for it); costs a host copy of "
                         "this rank's weights and optimizer state")
                  .resume(ResumePolicy::kReported));
  f.push_back(duration_field(KEY(checkpoint.max_wall_time),
                             "save and stop before this much wall time has passed (e.g. a few minutes under the job's "
                             "limit); 0 = no limit")
                  .resume(ResumePolicy::kReported));
  f.push_back(
      signal_list_field(KEY(checkpoint.preempt_signals),
                        "signals that mean preemption: finish the step, save, exit 143 (a second signal exits at once)")
          .resume(ResumePolicy::kReported));
}

void add_metrics_fields(std::vector<FieldSpec>& f) {
  f.push_back(
      enum_field(KEY(metrics.progress),
                 EnumTable<ProgressStyle>{{"auto", ProgressStyle::kAuto},
                                          {"bar", ProgressStyle::kBar},
                                          {"lines", ProgressStyle::kLines},
                                          {"off", ProgressStyle::kOff}},
                 "console progress: bar (redrawn line), lines (one per log step), off; auto = bar on a terminal")
          .resume(ResumePolicy::kReported));
  f.push_back(int_field(KEY(metrics.profile_at), 0, kMaxInt,
                        "profile from this step on with the PyTorch profiler: <output_dir>/profile/trace.json "
                        "(Perfetto, chrome://tracing) and ops.md (time per kernel or op); 0 = off")
                  .resume(ResumePolicy::kReported));
  f.push_back(int_field(KEY(metrics.profile_steps), 1, 1000, "how many steps metrics.profile_at profiles")
                  .resume(ResumePolicy::kReported));
  f.push_back(bool_field(KEY(metrics.tensorboard),
                         "TensorBoard event files in <output_dir>/tensorboard/: every number of metrics.jsonl as a "
                         "scalar (train/<key>, eval/<key>), the resolved recipe and the summary as text")
                  .resume(ResumePolicy::kReported));
}

// One function per recipe section, in the order the reference prints them.
std::vector<FieldSpec> build_schema() {
  std::vector<FieldSpec> f;
  add_run_fields(f);
  add_model_fields(f);
  add_data_fields(f);
  add_train_fields(f);
  add_precision_fields(f);
  add_kernels_fields(f);
  add_optim_fields(f);
  add_parallel_fields(f);
  add_checkpoint_fields(f);
  add_metrics_fields(f);
  return f;
}
#undef KEY

// Sections that exist even while they have no keys (printed as {}).
const std::vector<std::string> kSections = {"run",     "model", "data",     "train",      "precision",
                                            "kernels", "optim", "parallel", "checkpoint", "metrics"};

bool is_section(const std::string& path) {
  for (const auto& s : kSections)
    if (s == path) return true;
  for (const auto& f : schema())
    if (f.path.size() > path.size() && f.path.compare(0, path.size(), path) == 0 && f.path[path.size()] == '.')
      return true;
  return false;
}

// Names that may follow `prefix.` (fields and sub-sections), for suggestions.
std::vector<std::string> children_of(const std::string& prefix) {
  std::set<std::string> out;
  if (prefix.empty())
    for (const auto& s : kSections) out.insert(s);
  for (const auto& f : schema()) {
    if (!prefix.empty() && f.path.compare(0, prefix.size() + 1, prefix + ".") != 0) continue;
    std::string rest = prefix.empty() ? f.path : f.path.substr(prefix.size() + 1);
    out.insert(rest.substr(0, rest.find('.')));
  }
  return {out.begin(), out.end()};
}

void unknown_key(const std::string& prefix, const ConfigNode::Entry& e, Diagnostics& diag) {
  std::string full = prefix.empty() ? e.key : prefix + "." + e.key;
  std::string fix;
  std::string guess = did_you_mean(e.key, children_of(prefix));
  if (!guess.empty()) {
    fix = "did you mean '" + (prefix.empty() ? guess : prefix + "." + guess) + "'?";
  } else {
    for (const auto& f :
         schema())  // the right key in the wrong section? (the shallowest: optim.lr, not optim.muon.adamw.lr)
      if (f.path.size() > e.key.size() && f.path.substr(f.path.size() - e.key.size() - 1) == "." + e.key &&
          (guess.empty() || f.path.size() < guess.size()))
        fix = "did you mean '" + f.path + "'?", guess = f.path;
    if (guess.empty()) {
      std::string known;
      for (const auto& c : children_of(prefix)) known += (known.empty() ? "" : ", ") + c;
      fix = "known keys " + (prefix.empty() ? std::string("at the top level") : "in " + prefix) + ": " + known;
    }
  }
  diag.error(e.key_origin, full, "unknown key", fix);
}

void bind_map(const ConfigNode& node, const std::string& prefix, Settings& s, std::map<std::string, Origin>& origins,
              Diagnostics& diag) {
  for (const auto& e : node.entries) {
    std::string full = prefix.empty() ? e.key : prefix + "." + e.key;
    if (const FieldSpec* f = find_field(full)) {
      if (e.value.kind == ConfigNode::Kind::kNull) {
        diag.error(e.value.origin, full, "has no value", "give it a value (" + f->type + ") or remove the key");
        continue;
      }
      try {
        f->read(s, e.value);
        origins[full] = e.value.origin;
      } catch (const FieldProblem& p) {
        diag.error(e.value.origin, full, p.problem, p.fix.empty() ? "expected " + f->type : p.fix);
      }
    } else if (is_section(full)) {
      if (e.value.kind == ConfigNode::Kind::kMap) bind_map(e.value, full, s, origins, diag);
      else if (e.value.kind != ConfigNode::Kind::kNull) {
        const auto keys = children_of(full);
        diag.error(e.value.origin, full, "is a section, so it needs keys, got " + e.value.kind_name(),
                   "write it as a mapping, e.g. " + full + ": {" + keys.front() + ": ...}");
      }
    } else {
      unknown_key(prefix, e, diag);
    }
  }
}

void insert_at(json& root, const std::string& path, json value) {
  json* node = &root;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1)
    node = &(*node)[path.substr(start, dot - start)];
  (*node)[path.substr(start)] = std::move(value);
}

}  // namespace

const std::vector<FieldSpec>& schema() {
  static const std::vector<FieldSpec> fields = build_schema();
  return fields;
}

const FieldSpec* find_field(const std::string& path) {
  for (const auto& f : schema())
    if (f.path == path) return &f;
  return nullptr;
}

void bind_settings(const ConfigNode& root, Settings& settings, std::map<std::string, Origin>& origins,
                   Diagnostics& diag) {
  for (const auto& f : schema()) origins.emplace(f.path, Origin{"default"});
  bind_map(root, "", settings, origins, diag);
}

json settings_to_json(const Settings& settings) {
  json root = json::object();
  for (const auto& s : kSections) root[s] = json::object();
  for (const auto& f : schema()) insert_at(root, f.path, f.write(settings));
  root["run"]["output_dir"] = settings.resolved_output_dir();
  return root;
}

std::string schema_reference_markdown() {
  const Settings defaults;
  std::string out =
      "# Recipe reference\n\n"
      "Every recipe key with its type, default and meaning, one table per section. Generated from the schema\n"
      "by `gputrain print-config --reference > docs/recipe-reference.md` (a test fails while it is stale);\n"
      "how recipes combine and are checked is in [recipes](recipes.md).\n";
  std::string section;
  for (const auto& f : schema()) {
    const std::string top = f.path.substr(0, f.path.find('.'));
    if (top != section) {  // a new top-level section starts a new table
      section = top;
      out += "\n## " + section + "\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
    }
    std::string def = f.write(defaults).dump();
    if (def == "\"\"") def = "(empty)";
    std::string type;  // "a | b" is written "a \\| b": a bare "|" would split the Markdown cell
    for (char c : f.type) type.append(c == '|' ? "\\|" : std::string(1, c));
    out += "| `" + f.path + "` | " + type + " | `" + def + "` | " + f.doc + " |\n";
  }
  return out;
}

}  // namespace gputrain
