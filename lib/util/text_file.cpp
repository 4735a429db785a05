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

}  // namespace gputrain
