#include "util/replace_data.h"

namespace gputrain {

void replace_data(const torch::Tensor& t, const torch::Tensor& data) {
  if (!t.is_meta()) {
    t.set_data(data);
    return;
  }
  t.unsafeGetTensorImpl()->shallow_copy_from(data.getIntrusivePtr());
}

}  // namespace gputrain
