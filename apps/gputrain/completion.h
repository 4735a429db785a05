// `gputrain completion bash|zsh`: shell completion for the commands, their flags and the recipe
// keys --set takes, generated from the command line's own definition and the recipe schema.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

namespace gputrain::app {

// The completion script for `shell` ("bash" or "zsh") of the command line `cli`.
std::string completion_script(CLI::App& cli, const std::string& shell);

}  // namespace gputrain::app
