// parallel.offload_optimizer nvme (ZeRO-3): the optimizer state lives in a file (util/offload_file.h)
// and passes through memory one unit at a time. The parameters are split by unit (the embeddings,
// each block, the head) and each unit gets its own optimizer, built as the in-memory one would be;
// its state is written to the file and its tensors become views of it. A step reads unit k+1's
// state into buffers on the I/O thread while unit k updates, then writes unit k's back (the state
// tensors point at the buffers only during their unit's update). So memory holds about two units'
// state, the losses are the in-memory run's, and a checkpoint or a resume reads and writes the
// views as it would any state.
#pragma once
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "util/offload_file.h"

namespace gputrain {

class StreamedOptimizer : public Optimizer {
 public:
  using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;
  // `units`: the parameter names of each unit, in the order the step visits them (ZeRO-3's; the
  // parameters of `groups` in none follow in units of about kRestUnitBytes). `make` builds the
  // optimizer of one unit's groups. `copies`: by parameter name, a tensor shaped as it in a lower
  // precision that stays in memory in its place (the parameter's values move to the file).
  StreamedOptimizer(std::vector<ParamGroup> groups, const std::vector<std::vector<std::string>>& units,
                    const MakeOptimizer& make, std::unique_ptr<OffloadFile> file,
                    const std::map<std::string, torch::Tensor>& copies = {});
  ~StreamedOptimizer() override;

  void step(double lr) override;
  std::string describe() const override;
  std::string placement() const override;                         // the file, its units and what memory keeps
  int64_t resident_state_bytes() const override;                  // the step counters (the rest is in the file)
  int64_t resident_parameter_bytes(int64_t held) const override;  // the copies in place of the parameters filed
  bool folds_grad_scale() const override { return units_.front().optimizer->folds_grad_scale(); }
  static constexpr int64_t kRestUnitBytes = 64 << 20;

  uint64_t file_bytes() const { return file_->size(); }
  const std::string& dir() const { return file_->dir(); }
  size_t units() const { return units_.size(); }
  int64_t filed_parameter_bytes() const;  // of the parameters in the file
  // The most bytes of state (and filed parameters) one unit passes through memory with (about two at once).
  uint64_t largest_unit_bytes() const;

 private:
  struct Streamed {
    // The unit optimizer's state tensor or parameter: a view of the file, or a buffer while updating.
    torch::Tensor live;
    torch::Tensor view;  // of the file
    uint64_t offset = 0;
    torch::Tensor copy;  // a parameter's copy, set from it after each update
  };
  struct Unit {
    std::unique_ptr<Optimizer> optimizer;
    std::vector<Streamed> state;
  };
  // Reads unit k's state into fresh buffers on the I/O thread.
  std::future<void> start_reading(size_t k, std::vector<torch::Tensor>& buffers);
  std::unique_ptr<OffloadFile> file_;  // declared first: its I/O thread outlives the units
  std::vector<Unit> units_;
  std::string description_;
};

}  // namespace gputrain
