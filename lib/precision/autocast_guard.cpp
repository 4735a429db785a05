#include "precision/autocast_guard.h"

#include <ATen/autocast_mode.h>

namespace gputrain {

AutocastGuard::AutocastGuard(bool enabled, c10::DeviceType device, c10::ScalarType dtype)
    : active_(enabled), device_(device) {
  if (!active_) return;
  prev_enabled_ = at::autocast::is_autocast_enabled(device_);
  prev_dtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_, prev_dtype_);
}

AutocastState current_autocast(c10::DeviceType device) {
  return AutocastState{at::autocast::is_autocast_enabled(device), device, at::autocast::get_autocast_dtype(device)};
}

}  // namespace gputrain
