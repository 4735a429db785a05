// Autocast for one scope (LibTorch 2.x API): matmuls and convolutions run in
// the low-precision dtype, reductions and norms stay fp32, per ATen's op lists.
// Restores the previous state on exit; the cast cache is cleared when the
// outermost guard ends, as torch.autocast does.
#pragma once
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace gputrain {

class AutocastGuard {
 public:
  // enabled = false makes the guard a no-op (fp32, tf32, bf16-pure).
  AutocastGuard(bool enabled, c10::DeviceType device, c10::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_;
  c10::DeviceType device_;
  bool prev_enabled_ = false;
  c10::ScalarType prev_dtype_ = c10::kFloat;
};

// The calling thread's autocast state for `device`, to re-enter it elsewhere
// (activation checkpointing recomputes on the autograd engine's thread).
struct AutocastState {
  bool enabled = false;
  c10::DeviceType device = c10::DeviceType::CPU;
  c10::ScalarType dtype = c10::kFloat;
};
AutocastState current_autocast(c10::DeviceType device);

}  // namespace gputrain
