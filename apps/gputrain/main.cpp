// gputrain: parse the command line, call one library function, map errors to
// exit codes (0 ok, 1 runtime failure, 2 bad recipe or usage, 130/143 after a
// graceful SIGINT/SIGTERM stop). Nothing else happens here (DESIGN rule 5).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>

#include "commands.h"
#include "util/error.h"
#include "util/version.h"

namespace {

void add_recipe_args(CLI::App* cmd, gputrain::app::CommonArgs& a, bool required) {
  auto* opt = cmd->add_option("recipe", a.recipe, required ? "recipe YAML file" : "recipe YAML file (default: the built-in quickstart)");
  if (required) opt->required();
  cmd->add_option("--set", a.overrides, "override a key, e.g. --set optim.lr=3e-4 (repeatable; value is YAML)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

}  // namespace

int main(int argc, char** argv) {
  namespace app = gputrain::app;
  CLI::App cli{"gputrain: train transformer language models from a YAML recipe", "gputrain"};
  cli.set_version_flag("--version", gputrain::version_string());
  cli.require_subcommand(1);
  cli.footer("Exit codes: 0 ok, 1 runtime failure, 2 bad recipe or usage, 130 interrupted (SIGINT), 143 preempted (SIGTERM).");

  app::CommonArgs run_args, validate_args, print_args;
  std::string output_dir, format = "yaml";
  bool overwrite = false, reference = false;

  auto* run = cli.add_subcommand("run", "train a model from a recipe");
  add_recipe_args(run, run_args, false);
  run->add_option("--output-dir", output_dir, "where metrics go (same as --set run.output_dir=DIR)");
  run->add_flag("--overwrite", overwrite, "replace an earlier run's metrics in the output directory");

  auto* validate = cli.add_subcommand("validate", "check a recipe; exit 0, or 2 listing every problem");
  add_recipe_args(validate, validate_args, true);

  auto* print = cli.add_subcommand("print-config", "print the fully resolved recipe, defaults included");
  add_recipe_args(print, print_args, false);
  print->add_option("--format", format, "output format")->check(CLI::IsMember({"yaml", "json"}));
  print->add_flag("--reference", reference, "print every key with its type, default and meaning (Markdown)");

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
    if (*run) return app::cmd_run(run_args, output_dir, overwrite);
    if (*validate) return app::cmd_validate(validate_args);
    if (*print) return app::cmd_print_config(print_args, format, reference);
  } catch (const gputrain::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return gputrain::exit_code_for(e.kind());
  } catch (const std::exception& e) {  // LibTorch (c10::Error), std::bad_alloc, ...
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 2;
}
