#include "config/diagnostics.h"

#include <algorithm>

#include "util/error.h"

namespace gputrain {

std::string Origin::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

std::string Diagnostic::str() const {
  std::string s = origin.str() + ": " + key + ": " + problem;
  if (!fix.empty()) s += "\n    fix: " + fix;
  return s;
}

void Diagnostics::error(Origin o, std::string key, std::string problem, std::string fix) {
  errors_.push_back({std::move(o), std::move(key), std::move(problem), std::move(fix)});
}

void Diagnostics::warning(Origin o, std::string key, std::string problem, std::string fix) {
  warnings_.push_back({std::move(o), std::move(key), std::move(problem), std::move(fix)});
}

void Diagnostics::throw_if_errors() const {
  if (errors_.empty()) return;
  std::string msg =
      errors_.size() == 1 ? "invalid recipe:\n" : "invalid recipe (" + std::to_string(errors_.size()) + " problems):\n";
  for (const auto& d : errors_) msg += "  " + d.str() + "\n";
  msg.pop_back();
  throw config_error(msg);
}

static size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates)  // "optimizer" -> "optim": one is a prefix of the other
    if (std::min(c.size(), word.size()) >= 3 && (word.rfind(c, 0) == 0 || c.rfind(word, 0) == 0)) return c;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  // Accept up to a third of the word's length in edits (at least 2): "lr_rate"
  // -> "lr" is not a typo, "n_heads" -> "n_head" is.
  size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : "";
}

}  // namespace gputrain
