#pragma once
#include <string>

namespace gputrain {

// "gputrain 0.1.0 (git abc123, LibTorch 2.11.0, CUDA build)".
std::string version_string();

}  // namespace gputrain
