// What several commands share on the command line: the recipe and its --set overrides, the
// launcher's flags, count checks, and the check of the command words CLI11 reports vaguely.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "config/settings.h"
#include "parallel/launcher.h"

namespace gputrain::app {

struct CommonArgs {
  std::string recipe;  // empty = the built-in quickstart
  std::vector<std::string> overrides;
};

// The positional recipe and --set; `required` for commands that have no use for the quickstart.
void add_recipe_args(CLI::App* cmd, CommonArgs& a, bool required);

// `run`'s launcher flags (parallel/launcher.h); 0/empty = not given.
struct LaunchArgs {
  int nproc_per_node = 0;
  int nnodes = 0;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  bool launching() const { return nproc_per_node > 0 || nnodes > 0; }
};

// The launcher's options from `run`'s or `eval`'s flags; the caller adds the workers' arguments.
LaunchOptions launch_options(const LaunchArgs& l);

// --quantize none|nf4|fp4 (generate, eval): the model's block Linears in 4 bits, as model.quantize.base.
void add_quantize_option(CLI::App* cmd, QuantBase& q);
std::string quantize_flag_value(QuantBase q);  // the word for a worker's arguments

// Counts such as --steps: CLI::PositiveNumber would print a double's whole range on a bad value.
extern const CLI::Range kCount;

// A missing command ("gputrain", "gputrain optim") or a word where a command belongs that names
// none ("gputrain frobnicate", "gputrain data frob"): CLI11 reports only "A subcommand is
// required". Returns the error text, or "" when the words before the first option are fine.
std::string command_error(CLI::App& top, int argc, char** argv);

// spdlog's messages to stderr, for commands whose stdout is their result (generate, eval).
void messages_to_stderr();

}  // namespace gputrain::app
