#include "util/text_file.h"

#include <fstream>
#include <sstream>

#include "util/error.h"

namespace gputrain {

std::string read_text_file(const std::filesystem::path& path, const std::string& what, const std::string& fix) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw data_error("cannot read the " + what + " '" + path.string() + "'\n    fix: " + fix);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json parse_json_file(const std::filesystem::path& path, const std::string& what, const std::string& fix) {
  const std::string text = read_text_file(path, what, fix);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw data_error("'" + path.string() + "' is not valid JSON: " + e.what() + "\n    fix: " + fix);
  }
}

}  // namespace gputrain
