#include "parallel/text_broadcast.h"

#include <cstring>

namespace gputrain {

std::string broadcast_text(Communicator& comm, const std::string& text, int root, const std::string& what) {
  const bool sender = comm.rank() == root;
  torch::Tensor size = torch::tensor({static_cast<int64_t>(sender ? text.size() : 0)}, torch::kLong);
  comm.broadcast_now(size, root, what);
  torch::Tensor bytes = torch::zeros({size.item<int64_t>()}, torch::kUInt8);
  if (sender && !text.empty()) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  comm.broadcast_now(bytes, root, what);
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
}

}  // namespace gputrain
