#include <spdlog/spdlog.h>

#include <memory>

#include "commands.h"
#include "metrics/run_report.h"
#include "util/atomic_file.h"

namespace gputrain::app {

namespace {

struct ReportArgs {
  std::vector<std::string> runs;
  std::string out = "report.html";
};

int report(const ReportArgs& a) {
  const nlohmann::ordered_json data = collect_report_data(a.runs);
  for (const auto& note : data["notes"]) spdlog::warn("{}", note.get<std::string>());
  write_file_atomic(a.out, render_report_html(data));
  spdlog::info("report of {} run{} written to {} (self-contained: open it in any browser)", a.runs.size(),
               a.runs.size() == 1 ? "" : "s", a.out);
  return 0;
}

}  // namespace

void add_report(CLI::App& cli, Commands& commands) {
  auto a = std::make_shared<ReportArgs>();
  auto* cmd = cli.add_subcommand(
      "report", "one self-contained HTML page with charts of runs' metrics, their summaries and recipe differences");
  cmd->add_option("runs", a->runs, "runs' output folders (several are overlaid)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("-o,--out", a->out, "the HTML file to write")->capture_default_str();
  commands.push_back({cmd, [a] { return report(*a); }});
}

}  // namespace gputrain::app
