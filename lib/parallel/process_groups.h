// The one object that knows the run's degrees and this rank's place in them: the world, its
// dp x pp x cp x tp grid (ep runs inside dp) and a communicator for each group this rank belongs to
// (torchtitan's ParallelDims plays this part). What is done over the groups (sharding, gradient
// reduction, ZeRO, the pipeline) is parallel/parallelize.h's. A single process that no launcher
// started has no communicators: every group is null and every collective returns its input.
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "config/settings.h"
#include "parallel/communicator.h"
#include "parallel/grid.h"
#include "parallel/world.h"

namespace gputrain {

class ProcessGroups {
 public:
  // Joins the world (for more than one process); a config error unless dp x tp x pp x cp is its size.
  ProcessGroups(const World& world, const ParallelSettings& p, torch::Device device);
  ~ProcessGroups();

  const World& world() const { return world_; }
  const Grid& grid() const { return grid_; }
  const GridCoord& coord() const { return coord_; }
  bool distributed() const { return world_comm_ != nullptr; }

  // Null where the group does not exist (degree 1, or a single process).
  Communicator* world_comm() const { return world_comm_.get(); }
  Communicator* tp() const { return tp_.get(); }
  Communicator* pp() const { return pp_.get(); }
  Communicator* pipeline_ends() const { return ends_.get(); }  // the pp group's first and last stage, on those two
  Communicator* cp() const { return cp_.get(); }               // the ranks that split this rank's sequences
  // The grid's replicas (every dp rank's cp ranks): they sum gradients and share ZeRO's shards. The
  // world itself when they are its whole size.
  Communicator* dp() const { return dp_; }
  Communicator* ep() const { return ep_.get(); }  // the run of ep dp ranks that split the experts
  Communicator* expert_replicas() const { return expert_replicas_.get(); }  // the ranks holding this rank's experts

  // `values` summed over every rank (`what` names the all-reduce in errors).
  std::vector<double> sum_over_world(std::vector<double> values, const std::string& what) const;
  // Whether `flag` is set on any rank.
  bool any_rank(bool flag, const std::string& what) const;

 private:
  World world_;
  Grid grid_;
  GridCoord coord_;
  std::unique_ptr<Communicator> world_comm_;
  std::unique_ptr<Communicator> tp_, cp_, pp_, ends_, dp_own_, ep_, expert_replicas_;
  Communicator* dp_ = nullptr;  // world_comm_, dp_own_ (fewer replicas than the world) or none (one)
};

}  // namespace gputrain
