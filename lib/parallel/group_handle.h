// How the parallel autograd functions (tensor_parallel.cpp, expert_parallel.cpp)
// carry their communicator: as an integer, because autograd functions take
// tensors and IValues only. The communicator outlives every graph.
#pragma once
#include <cstdint>

#include "parallel/communicator.h"

namespace gputrain {

inline int64_t group_handle(Communicator& c) { return reinterpret_cast<int64_t>(&c); }
inline Communicator& group_from_handle(int64_t handle) { return *reinterpret_cast<Communicator*>(handle); }

}  // namespace gputrain
