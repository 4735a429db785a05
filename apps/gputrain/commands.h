// The commands of the command line. Each command's file adds its subcommand, its flags and what it
// runs (add_<command>); main() parses, runs the chosen one and maps errors to exit codes. A new
// command: its cmd_<name>.cpp, its add_<name> below, and one entry in main.cpp's list.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

#include "command_line.h"

namespace gputrain::app {

// A command as added to the command line and what runs it when it was given (returns the exit code).
struct Command {
  CLI::App* app;
  std::function<int()> run;
};
using Commands = std::vector<Command>;

void add_run(CLI::App& cli, Commands& commands);
void add_plan(CLI::App& cli, Commands& commands);
void add_validate(CLI::App& cli, Commands& commands);
void add_print_config(CLI::App& cli, Commands& commands);
void add_data(CLI::App& cli, Commands& commands);     // data prepare, data bench
void add_optim(CLI::App& cli, Commands& commands);    // optim bench
void add_kernels(CLI::App& cli, Commands& commands);  // kernels bench
void add_export(CLI::App& cli, Commands& commands);
void add_generate(CLI::App& cli, Commands& commands);
void add_eval(CLI::App& cli, Commands& commands);
void add_sweep(CLI::App& cli, Commands& commands);
void add_report(CLI::App& cli, Commands& commands);
void add_completion(CLI::App& cli, Commands& commands);

// `plan`'s output, which `run --dry-run` prints too. world_size 0 = the recipe's own degrees
// (parallel.dp x tp x pp, dp auto counting as 1).
int print_plan(const CommonArgs& a, int world_size);

}  // namespace gputrain::app
