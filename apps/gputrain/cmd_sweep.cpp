#include <filesystem>

#include "commands.h"
#include "train/sweep.h"

namespace gputrain::app {

int cmd_sweep(SweepOptions o) {
  o.executable = std::filesystem::read_symlink("/proc/self/exe").string();
  return run_sweep(o);
}

}  // namespace gputrain::app
