#include "util/error.h"

namespace gputrain {

int exit_code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kConfig:
    case ErrorKind::kUsage:
    case ErrorKind::kData:
      return 2;
    case ErrorKind::kRuntime:
      return 1;
  }
  return 1;
}

}  // namespace gputrain
