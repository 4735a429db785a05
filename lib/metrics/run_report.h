// `gputrain report`: one self-contained HTML page (no network at view time) comparing runs: charts
// of metrics.jsonl drawn as inline SVG by the page's own script (metrics/report_page.html),
// several runs overlaid, smoothing and log-scale toggles; each run's summary.json; and the keys
// in which the runs' resolved recipes differ.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gputrain {

// What the page shows, as the JSON it embeds: runs [{name, dir, series {key: [[step, value]...]},
// summary, status}], differences [{key, values}], notes. Throws a data Error naming a folder
// without metrics.jsonl.
nlohmann::ordered_json collect_report_data(const std::vector<std::string>& run_dirs);

// The page for `data` (collect_report_data's).
std::string render_report_html(const nlohmann::ordered_json& data);

}  // namespace gputrain
