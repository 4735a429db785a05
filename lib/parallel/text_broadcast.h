// Data that is not a tensor, sent between ranks as one (rank 0's checkpoint writer id, which every
// rank writes its part of a checkpoint under).
#pragma once
#include <string>

#include "parallel/communicator.h"

namespace gputrain {

// Rank `root`'s `text` on every rank of comm (every rank calls it); `what` names it in errors.
std::string broadcast_text(Communicator& comm, const std::string& text, int root, const std::string& what);

}  // namespace gputrain
