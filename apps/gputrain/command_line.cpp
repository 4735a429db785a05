#include "command_line.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "util/error.h"

namespace gputrain::app {

void add_recipe_args(CLI::App* cmd, CommonArgs& a, bool required) {
  auto* opt = cmd->add_option("recipe", a.recipe,
                              required ? "recipe YAML file" : "recipe YAML file (default: the built-in quickstart)");
  if (required) opt->required();
  cmd->add_option("--set", a.overrides, "override a key, e.g. --set optim.lr=3e-4 (repeatable; value is YAML)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

LaunchOptions launch_options(const LaunchArgs& l) {
  if (std::getenv("RANK") || std::getenv("OMPI_COMM_WORLD_RANK"))
    throw usage_error(
        "--nproc-per-node inside a process that a launcher started already (RANK or "
        "OMPI_COMM_WORLD_RANK is set)\n    fix: drop --nproc-per-node, or unset those variables");
  LaunchOptions o;
  o.nproc_per_node = std::max(1, l.nproc_per_node);
  o.nnodes = std::max(1, l.nnodes);
  o.node_rank = l.node_rank;
  // One node rendezvouses on loopback (a MASTER_ADDR left in the environment may name another host).
  if (!l.master_addr.empty()) o.master_addr = l.master_addr;
  else if (const char* env = std::getenv("MASTER_ADDR"); env && o.nnodes > 1) o.master_addr = env;
  else if (o.nnodes > 1)
    throw usage_error("--nnodes " + std::to_string(o.nnodes) + " needs --master-addr (node 0's host)");
  o.master_port = l.master_port;
  if (o.master_port == 0)
    if (const char* env = std::getenv("MASTER_PORT")) o.master_port = std::atoi(env);
  o.executable = std::filesystem::read_symlink("/proc/self/exe").string();
  return o;
}

namespace {
const std::map<std::string, QuantBase> kQuantBases = {
    {"none", QuantBase::kNone}, {"nf4", QuantBase::kNf4}, {"fp4", QuantBase::kFp4}};
}  // namespace

void add_quantize_option(CLI::App* cmd, QuantBase& q) {
  cmd->add_option("--quantize", q,
                  "the block Linears in 4 bits as bitsandbytes' load_in_4bit (double quantization, blocks of 64): "
                  "none, nf4 or fp4")
      ->transform(CLI::CheckedTransformer(kQuantBases))
      ->default_str("none");
}

std::string quantize_flag_value(QuantBase q) {
  for (const auto& [word, value] : kQuantBases)
    if (value == q) return word;
  return "none";
}

const CLI::Range kCount(int64_t{1}, int64_t{1} << 30);

std::string command_error(CLI::App& top, int argc, char** argv) {
  CLI::App* app = &top;
  std::string path = "gputrain";
  for (int i = 1;; ++i) {
    const auto commands = app->get_subcommands([](CLI::App*) { return true; });
    if (commands.empty()) return "";
    std::string names;
    for (CLI::App* c : commands) names.append(names.empty() ? "" : ", ").append(c->get_name());
    const std::string fix = "\n    fix: use one of " + names + " (`" + path + " --help` describes them)";
    if (i == argc) return "`" + path + "` needs a command" + fix;
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return "";  // --help, --version, or an option CLI11 reports
    auto it = std::find_if(commands.begin(), commands.end(), [&](CLI::App* c) { return c->get_name() == word; });
    if (it == commands.end()) return "unknown command '" + word + "' for `" + path + "`" + fix;
    app = *it;
    path.append(" ").append(word);
  }
}

void messages_to_stderr() {
  auto log = spdlog::stderr_color_mt("stderr");
  log->set_pattern("[%H:%M:%S] %^%l%$ %v");
  log->flush_on(spdlog::level::info);
  spdlog::set_default_logger(log);
}

}  // namespace gputrain::app
