#include "parallel/rank_share.h"

namespace gputrain {

std::vector<NamedTensor> RankShare::held_of(std::vector<NamedTensor> named) const {
  std::vector<NamedTensor> out;
  for (auto& e : named)
    if (layout.find(e.name)) out.push_back(std::move(e));
  return out;
}

bool RankShare::stage_counts(const std::string& name) const {
  return !(tied_weight.defined() && !layout.stage.embeds && name == "transformer.wte.weight");
}

}  // namespace gputrain
