#include "parallel/rank_share.h"

namespace gputrain {

std::vector<NamedTensor> RankShare::held_of(std::vector<NamedTensor> named) const {
  if (!holds_part) return named;
  std::vector<NamedTensor> out;
  for (auto& e : named)
    if (held.count(e.name)) out.push_back(std::move(e));
  return out;
}

bool RankShare::stage_counts(const std::string& name) const {
  return !(tied_weight.defined() && !stage.embeds && name == "transformer.wte.weight");
}

}  // namespace gputrain
