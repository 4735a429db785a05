// See third_party/gloo_declarations/README.md: declarations only.
#pragma once
#include <chrono>

namespace gloo {

class Context {
 public:
  // Named in an inline ProcessGroupGloo member that gputrain never calls.
  void setTimeout(std::chrono::milliseconds timeout);
};

}  // namespace gloo
