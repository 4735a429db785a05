// Typed errors thrown by the library. Only main() maps them to exit codes
// (DESIGN rule 6): a ConfigError or UsageError is the user's input (exit 2),
// everything else is a runtime failure (exit 1).
#pragma once
#include <stdexcept>
#include <string>

namespace gputrain {

enum class ErrorKind {
  kConfig,   // the recipe or an override is wrong: exit 2
  kUsage,    // the command line is wrong: exit 2
  kData,     // a data file is missing, malformed or inconsistent with the recipe: exit 2
  kRuntime,  // anything that went wrong while running: exit 1
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

inline Error config_error(const std::string& m) { return Error(ErrorKind::kConfig, m); }
inline Error usage_error(const std::string& m) { return Error(ErrorKind::kUsage, m); }
inline Error data_error(const std::string& m) { return Error(ErrorKind::kData, m); }
inline Error runtime_error(const std::string& m) { return Error(ErrorKind::kRuntime, m); }

// The process exit code for an error kind (README "Exit codes").
int exit_code_for(ErrorKind kind);

}  // namespace gputrain
