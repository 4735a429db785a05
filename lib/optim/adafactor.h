// Adafactor (Shazeer & Stern 2018), computed as transformers' Adafactor
// (the common PyTorch implementation). For a matrix (or any tensor with 2+
// dimensions) the second moment is factored into row and column means of
// grad^2 + eps[0]: rows + cols floats instead of rows x cols, so matrices
// carry almost no state. Vectors keep a full second moment. Each update is
// clipped to RMS <= clip_threshold; beta1 > 0 adds a momentum (4 bytes per
// parameter). Decay of the second moment follows 1 - step^decay_rate.
//
// Our defaults differ from transformers' in two switches, both off:
// relative_step (lr = min(1e-2, 1/sqrt(step))) and scale_parameter (lr
// scaled by the parameter's RMS), so that optim.lr and the schedule drive
// it as they drive every other optimizer. Weight decay is decoupled and
// scaled by the step's lr, as there.
//
// Speed: the statistics of matrices of one shape (a model's layers share a
// few) are computed on a stack of them, and the clipping and lr scaling are
// multi-tensor ops, so a step runs the same ~130 ops however many layers the
// model has (GPT-2 124M: 129 instead of 1,747 op by op).
#pragma once
#include "config/settings.h"
#include "optim/optimizer.h"
#include "optim/optimizer_spec.h"

namespace gputrain {

class Adafactor : public Optimizer {
 public:
  Adafactor(std::vector<ParamGroup> groups, AdafactorSettings opts);
  void step(double lr) override;
  std::string describe() const override;
  bool takes_row_sharding() const override { return true; }

 private:
  struct Slot {
    bool factored = false;
    torch::Tensor step, row, col, exp_avg_sq, exp_avg;  // row/col when factored, else exp_avg_sq
  };
  AdafactorSettings opts_;
  std::vector<std::vector<Slot>> slots_;
};

// optim.name: adafactor, for the registry (optim/optimizer_specs.cpp).
const OptimizerSpec& adafactor_spec();

}  // namespace gputrain
