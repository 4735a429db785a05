// The matrices a rank holds in shards, for optimizers that need each one whole (Muon's iteration:
// optim/optimizer.h MatrixSharding, optim/matrix_owners.h): tensor parallelism's splits over the tp
// group, ZeRO-3's rows over the dp group or an expert's replicas.
#pragma once
#include <optional>

#include "optim/optimizer.h"
#include "parallel/communicator.h"
#include "parallel/process_groups.h"
#include "parallel/rank_share.h"

namespace gputrain {

// nullopt where every matrix is whole on the rank that updates it.
std::optional<MatrixSharding> matrix_sharding(const RankShare& share, const ProcessGroups& groups);

// MatrixGroup's exchange over `c`: one asynchronous all-to-all of the flat tensors (on c's device and back).
MatrixGroup matrix_group(Communicator& c);

}  // namespace gputrain
