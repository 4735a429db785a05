// Building a model without memory: while a MetaBuild is alive on this thread, the model's layers
// create their parameters on the meta device (shapes only). Whoever builds so gives storage later
// to only the parts a process keeps (parallel/parallelize.h), filled by model/initial_values.h.
#pragma once
#include <torch/types.h>

namespace gputrain {

class MetaBuild {
 public:
  MetaBuild();
  ~MetaBuild();
  MetaBuild(const MetaBuild&) = delete;
  MetaBuild& operator=(const MetaBuild&) = delete;

 private:
  bool outer_;
};

// Options for a new parameter: the meta device inside a MetaBuild, else the defaults (the host, fp32).
torch::TensorOptions parameter_options();

}  // namespace gputrain
