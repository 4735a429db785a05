#include "parallel/rank_layout.h"

#include <stdexcept>

#include "model/architecture.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"

namespace gputrain {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// ZeRO-1/2's owners of `group` (trainable ones get one, in gradient order: reverse registration).
void assign_owners(std::vector<HeldParameter*> group, int replicas) {
  std::vector<HeldParameter*> trainable;
  for (auto it = group.rbegin(); it != group.rend(); ++it)
    if ((*it)->trainable) trainable.push_back(*it);
  std::vector<int64_t> sizes;
  for (const HeldParameter* h : trainable) sizes.push_back(h->numel());
  const std::vector<int> owners = partition_contiguous(sizes, replicas);
  for (size_t i = 0; i < trainable.size(); ++i) trainable[i]->owner = owners[i];
}

}  // namespace

TensorShard tensor_split_of(const std::string& name, const ModelSettings& m) {
  if (name.rfind("transformer.h.", 0) != 0 || expert_of(name) >= 0) return {name, -1};
  // Column-parallel: rows of W, b and LoRA's B, each section (q, k, v; SwiGLU's gate, up) on its own.
  for (const char* end : {".attn.c_attn.weight", ".attn.c_attn.bias", ".attn.c_attn.lora_B"})
    if (ends_with(name, end)) return {name, 0, {m.n_head, m.kv_heads(), m.kv_heads()}};
  for (const char* end : {".mlp.c_fc.weight", ".mlp.c_fc.bias", ".mlp.c_fc.lora_B"})
    if (ends_with(name, end))
      return {name, 0, architecture(m).mlp == MlpKind::kSwiGlu ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{1}};
  // Row-parallel: columns of W and of LoRA's A; the bias stays whole and is added after the sum.
  for (const char* end : {".attn.c_proj.weight", ".mlp.c_proj.weight", ".attn.c_proj.lora_A", ".mlp.c_proj.lora_A"})
    if (ends_with(name, end)) return {name, 1, {1}};
  return {name, -1};
}

int64_t expert_of(const std::string& name) {
  const std::string mark = ".mlp.experts.";
  const size_t at = name.find(mark);
  if (at == std::string::npos) return -1;
  return std::stoll(name.substr(at + mark.size()));
}

bool RankLayout::owns(const HeldParameter& p) const {
  if (!p.trainable) return false;
  if (zero == 0) return true;
  return p.owner == (p.expert ? expert_replica : replica);
}

const HeldParameter* RankLayout::find(const std::string& name) const {
  const auto it = index.find(name);
  return it == index.end() ? nullptr : &parameters[it->second];
}

RankLayout rank_layout(const std::vector<ParamShape>& shapes, const ModelSettings& m, const ParallelSettings& p,
                       const Grid& g, int rank) {
  RankLayout l;
  l.grid = g;
  l.at = g.coord(rank);
  l.replicas = g.replicas();
  l.replica = l.at.dp * g.cp() + l.at.cp;
  l.expert_replicas = g.replicas() / g.ep();
  l.expert_replica = l.at.dp / g.ep() * g.cp() + l.at.cp;  // its index in Grid::expert_replica_group
  l.zero = g.replicas() > 1 ? p.zero : 0;
  l.stages = split_stages(m, g.pp());
  l.stage = l.stages[static_cast<size_t>(l.at.pp)];
  l.local_experts = m.moe.experts / g.ep();
  l.first_expert = (l.at.dp % g.ep()) * l.local_experts;  // its index in Grid::ep_group
  l.chunks = sequence_chunks(m.seq_len, g.cp(), l.at.cp);
  for (const ParamShape& s : shapes) {
    if (!stage_holds(s.name, l.stage, m.tie_embeddings)) continue;
    const int64_t e = expert_of(s.name);
    if (e >= 0 && (e < l.first_expert || e >= l.first_expert + l.local_experts)) continue;
    HeldParameter h{s, e >= 0 && g.ep() > 1, {s.name, -1}};
    if (g.tp() > 1) h.split = tensor_split_of(s.name, m);
    if (h.split.dim >= 0) {
      const int64_t whole = h.sizes.at(static_cast<size_t>(h.split.dim));
      if (whole % g.tp() != 0)
        throw std::logic_error("rank_layout: parallel.tp does not divide " + s.name + " (validate refuses this)");
      h.sizes[static_cast<size_t>(h.split.dim)] = whole / g.tp();
    }
    l.parameters.push_back(std::move(h));
  }
  for (size_t i = 0; i < l.parameters.size(); ++i) l.index.emplace(l.parameters[i].name, i);
  std::vector<HeldParameter*> dense, experts;
  for (HeldParameter& h : l.parameters) (h.expert ? experts : dense).push_back(&h);
  assign_owners(dense, l.replicas);
  assign_owners(experts, l.expert_replicas);
  return l;
}

}  // namespace gputrain
