#include "util/process_info.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <fstream>
#include <iterator>

namespace gputrain {

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

bool process_running(pid_t pid) {
  if (pid <= 0) return false;
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

std::string process_command_line(size_t max_chars) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw)
    if (c == '\0') c = ' ';
  // argv[0] as a full path says little to a reader; its file name is the program.
  if (const size_t space = raw.find(' '), slash = raw.rfind('/', space); slash != std::string::npos)
    raw.erase(0, slash + 1);
  if (raw.size() > max_chars) raw = raw.substr(0, max_chars - 3) + "...";
  return raw;
}

}  // namespace gputrain
