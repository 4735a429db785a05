// gputrain: parse the command line, run the one command given, map errors to exit codes (0 ok, 1
// runtime failure, 2 bad recipe or usage, 130/143 after a graceful SIGINT/SIGTERM stop). The
// commands add themselves (commands.h); nothing else happens here (docs/architecture.md, rule 5).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"
#include "util/error.h"
#include "util/version.h"

int main(int argc, char** argv) {
  namespace app = gputrain::app;
  CLI::App cli{"gputrain: train transformer language models from a YAML recipe", "gputrain"};
  cli.set_version_flag("--version", gputrain::version_string());
  cli.require_subcommand(1);
  cli.footer(
      "Exit codes: 0 ok, 1 runtime failure, 2 bad recipe, data, checkpoint or usage, 130 interrupted (SIGINT), 143 "
      "preempted (SIGTERM, SIGUSR1, max_wall_time). With --nproc-per-node: a failed worker's own code.");
  app::Commands commands;
  // In the order `gputrain --help` lists them.
  for (auto add : {app::add_run, app::add_plan, app::add_validate, app::add_print_config, app::add_data, app::add_optim,
                   app::add_kernels, app::add_export, app::add_generate, app::add_eval, app::add_sweep, app::add_report,
                   app::add_completion})
    add(cli, commands);

  if (const std::string wrong = app::command_error(cli, argc, argv); !wrong.empty()) {
    std::fprintf(stderr, "error: %s\n", wrong.c_str());
    return 2;
  }
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {
    cli.exit(e);
    return 2;
  }

  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  try {
    for (const app::Command& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const gputrain::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return gputrain::exit_code_for(e.kind());
  } catch (const std::exception& e) {  // LibTorch (c10::Error), std::bad_alloc, ...
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 2;
}
