// Named tensors between two ranks (checkpoints gather every rank's shards on rank 0 this way).
#pragma once
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "util/named_tensor.h"

namespace gputrain {

// Named tensors in three messages (tags tag..tag+2): sizes, a JSON list of (name, dtype, shape),
// the bytes. `what` names the transfer in errors (a timeout, a peer gone).
void send_tensors(Communicator& comm, const std::vector<NamedTensor>& tensors, int dst, int tag,
                  const std::string& what);
// What send_tensors(comm, ..., src, tag) sent, as tensors on the CPU.
std::vector<NamedTensor> receive_tensors(Communicator& comm, int src, int tag, const std::string& what);

// Rank `root`'s `text` on every rank of comm (every rank calls it).
std::string broadcast_text(Communicator& comm, const std::string& text, int root, const std::string& what);

}  // namespace gputrain
