// Who a process is, for the names and lock files that tell one writer from
// another: this host's name, and whether a pid on this host still runs.
#pragma once
#include <string>
#include <sys/types.h>

namespace gputrain {

// gethostname(), or "localhost" where it fails.
std::string host_name();

// Whether a process with this pid exists on this host (kill(pid, 0); a
// process of another user counts as running).
bool process_running(pid_t pid);

// This process's command line, its arguments joined by spaces (for people
// reading a lock file), at most `max_chars` long.
std::string process_command_line(size_t max_chars = 200);

}  // namespace gputrain
