// One message per problem found in a recipe: where (file:line:col), which key,
// what is wrong and how to fix it (DESIGN rule 4). Validation collects them
// all and throws once, so a user fixes every problem in one round.
#pragma once
#include <string>
#include <vector>

namespace gputrain {

// Where a value came from. line/col are 1-based; 0 means "no position"
// (a built-in default, or a --set override whose position is the flag itself).
struct Origin {
  std::string file;  // recipe path, "<built-in quickstart>", "--set", or "default"
  int line = 0;
  int col = 0;
  std::string str() const;
  bool is_default() const { return file == "default"; }
};

struct Diagnostic {
  Origin origin;
  std::string key;      // dotted path, e.g. "model.n_head"
  std::string problem;  // what is wrong, with the offending value
  std::string fix;      // what to do instead
  std::string str() const;
};

class Diagnostics {
 public:
  void error(Origin o, std::string key, std::string problem, std::string fix);
  void warning(Origin o, std::string key, std::string problem, std::string fix);
  const std::vector<Diagnostic>& errors() const { return errors_; }
  const std::vector<Diagnostic>& warnings() const { return warnings_; }
  // Throws a config Error listing every error, if there is any.
  void throw_if_errors() const;

 private:
  std::vector<Diagnostic> errors_;
  std::vector<Diagnostic> warnings_;
};

// The closest candidate by edit distance, or "" when none is close enough.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace gputrain
