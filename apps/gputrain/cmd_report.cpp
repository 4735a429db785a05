#include <spdlog/spdlog.h>

#include "commands.h"
#include "metrics/run_report.h"
#include "util/atomic_file.h"

namespace gputrain::app {

int cmd_report(const std::vector<std::string>& run_dirs, const std::string& out) {
  const nlohmann::ordered_json data = collect_report_data(run_dirs);
  for (const auto& note : data["notes"]) spdlog::warn("{}", note.get<std::string>());
  write_file_atomic(out, render_report_html(data));
  spdlog::info("report of {} run{} written to {} (self-contained: open it in any browser)", run_dirs.size(),
               run_dirs.size() == 1 ? "" : "s", out);
  return 0;
}

}  // namespace gputrain::app
