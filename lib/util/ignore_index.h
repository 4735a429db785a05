// The target id that takes no loss (padding, masked document boundaries).
// Shared by the data loader, which writes it, and the model's loss, which
// skips it; -100 is also PyTorch's cross_entropy default.
#pragma once
#include <cstdint>

namespace gputrain {

inline constexpr int64_t kIgnoreIndex = -100;

}  // namespace gputrain
