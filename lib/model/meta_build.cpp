#include "model/meta_build.h"

namespace gputrain {
namespace {
thread_local bool building_on_meta = false;
}  // namespace

MetaBuild::MetaBuild() : outer_(building_on_meta) { building_on_meta = true; }
MetaBuild::~MetaBuild() { building_on_meta = outer_; }

torch::TensorOptions parameter_options() {
  return building_on_meta ? torch::TensorOptions().device(torch::kMeta) : torch::TensorOptions();
}

}  // namespace gputrain
