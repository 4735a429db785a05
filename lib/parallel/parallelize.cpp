#include "parallel/parallelize.h"

#include <fmt/format.h>

#include <map>
#include <optional>

#include "model/activation_checkpointing.h"
#include "model/quantized_weight.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/fully_sharded.h"
#include "parallel/initial_parts.h"
#include "parallel/pipeline.h"
#include "parallel/rank_layout.h"
#include "parallel/sharded_4bit_base.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tensor_parallel_4bit.h"

namespace gputrain {
namespace {

bool fully_shards(const ProcessGroups& groups, const ParallelizeOptions& options) {
  return options.parallel.zero == 3 && groups.dp() != nullptr;
}

// ZeRO-3 on CUDA with parallel.offload_params (or a file's state): the shards live on the host.
bool offloads_params(const ParallelizeOptions& options) {
  return optimizer_placement(options.parallel, options.device, "", true).shards_on_host;
}

// The model's whole parameters, before any rank keeps its part: what the layout is computed from.
std::vector<ParamShape> whole_shapes(Gpt& model) {
  std::vector<ParamShape> out;
  for (const auto& item : model->named_parameters())
    out.push_back({item.key(), item.value().sizes().vec(), item.value().requires_grad()});
  return out;
}

// The pipeline stage's blocks: the others' parameters are emptied (the layout's stage).
void keep_pipeline_stage(Gpt& model, const ProcessGroups& groups, RankShare& share) {
  if (!groups.pp()) return;
  keep_stage(model, share.stage());
  if (model->cfg.tie_embeddings && (share.stage().embeds || share.stage().has_head))
    share.tied_weight = model->transformer->wte->weight;
}

// ZeRO-3's group of each parameter: the ranks sharing its rows (an expert's replicas, else dp).
ShardGroupOf zero3_group_of(const ProcessGroups& groups) {
  return
      [&groups](const std::string& name) { return ep_splits(groups, name) ? groups.expert_replicas() : groups.dp(); };
}

// Where ZeRO-3's shards live: the host for parallel.offload_params, else the compute device.
torch::Device zero3_shard_device(const ParallelizeOptions& options) {
  return offloads_params(options) ? torch::Device(torch::kCPU) : options.device;
}

// ZeRO-3: rank 0 of each group decides the weights (as the replicas' do otherwise), then each rank
// keeps its rows (an expert's shared by its replicas; with none, ep = dp, it stays whole).
// Built on meta, each rank computes its own rows (`initial`): the same numbers rank 0 would have sent.
void shard_fully(Gpt& model, const ProcessGroups& groups, const ParallelizeOptions& options,
                 const std::vector<NamedTensor>& held, const InitialParts* initial,
                 const std::vector<UnitStorage>& base_storage, RankShare& share) {
  if (!initial) {
    std::vector<NamedTensor> dense, experts;
    for (const auto& p : held) (ep_splits(groups, p.name) ? experts : dense).push_back(p);
    broadcast_parameters(*groups.dp(), dense);
    if (groups.expert_replicas()) broadcast_parameters(*groups.expert_replicas(), experts);
  }
  const ParallelSettings& p = options.parallel;
  ShardPlacement place{
      options.device, zero3_shard_device(options), p.reshard_after_forward,
      p.gather_dtype == GatherDtype::kBf16 ? std::optional<torch::ScalarType>(torch::kBFloat16) : std::nullopt,
      options.shard_blocks};
  share.fully_sharded = std::make_shared<FullyShardedModel>(
      *groups.dp(), model, held, place, zero3_group_of(groups),
      initial ? ShardFill([initial](const std::string& name, torch::Tensor& shard, int64_t first, int64_t count) {
        initial->fill_rows(name, shard, first, count);
      })
              : ShardFill(),
      base_storage);
  model->unit_hooks = share.fully_sharded;
  share.weights = share.fully_sharded->shards();
  // The pipeline's ends sum the tied embedding's gradients shard by shard (the same rows at either end).
  for (const auto& w : share.weights)
    if (share.tied_weight.defined() && w.name == "transformer.wte.weight") share.tied_weight = w.tensor;
}

// QLoRA: the held block Linears' weights in 4 bits, each Hugging Face tensor read (or drawn) and
// quantized alone, so this rank never holds its unquantized weights whole; one a bitsandbytes folder
// keeps in 4 bits is taken as stored. Under ZeRO-3 each rank quantizes and keeps only its blocks
// (parallel/sharded_4bit_base.h), their storage gathered with their units (`storage`); under tp its
// slice's blocks (parallel/tensor_parallel_4bit.h).
int64_t quantize_held_base(Gpt& model, const std::vector<NamedTensor>& held, const InitialParts* initial,
                           const ProcessGroups& groups, const ParallelizeOptions& options,
                           std::vector<UnitStorage>& storage) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& h : held) by_name[h.name] = h.tensor;
  const auto holds = [&](const std::string& name) { return by_name.count(name) > 0; };
  const auto rows = [&](const std::string& name, torch::Tensor& out, int64_t first, int64_t count) {
    if (initial) initial->fill_rows(name, out, first, count);
    else out.copy_(by_name.at(name).narrow(0, first, count));
  };
  const auto stored = [&](const std::string& name, int64_t first, int64_t count) {
    return initial ? initial->stored_4bit(name, first, count) : std::nullopt;
  };
  if (groups.tp()) {  // each rank its slice's blocks (parallel/tensor_parallel_4bit.h)
    const auto whole_stored = [&](const std::string& name, int64_t first, int64_t count) {
      return initial ? initial->whole_stored_4bit(name, first, count) : std::nullopt;
    };
    return quantize_sliced_base(
        *model, holds, rows, whole_stored, [&](const std::string& name) { return tensor_split_of(name, model->cfg); },
        *groups.tp(), options.device);
  }
  if (!fully_shards(groups, options)) return quantize_frozen_base(*model, holds, rows, options.device, stored);
  Sharded4bitBase base = quantize_sharded_base(*model, holds, rows, stored, zero3_group_of(groups), options.device,
                                               zero3_shard_device(options));
  storage = std::move(base.storage);
  return base.bytes;
}

// Every step up to the weights' values (tp, cp, the stage, ep, checkpointing, ZeRO-3's rows), the same
// for a trained model and a frozen one: what this rank holds goes to `share`. Built on meta: returns
// what each part was filled from.
std::unique_ptr<InitialParts> lay_out(Gpt& model, const ProcessGroups& groups, const ParallelizeOptions& options,
                                      const PartReader* files, RankShare& share) {
  // Built on meta: the whole shapes, before this rank keeps its slices, say which elements it fills.
  std::unique_ptr<InitialParts> initial;
  if (model->built_on_meta()) initial = std::make_unique<InitialParts>(model, files);
  const Grid& grid = groups.grid();
  share.layout = rank_layout(whole_shapes(model), model->cfg, options.parallel, grid, grid.rank_of(groups.coord()));
  if (groups.tp()) {
    share.tensor_split = parallelize_tensor(model, *groups.tp());
    if (initial) initial->set_tensor_split(share.tensor_split, groups.tp()->rank(), groups.tp()->size());
  }
  if (groups.cp()) parallelize_context(model, *groups.cp(), options.parallel.cp_method);
  keep_pipeline_stage(model, groups, share);
  if (groups.ep()) parallelize_experts(model, *groups.ep());  // (each rank's experts: the layout's)
  share.recomputed_blocks = apply_activation_checkpointing(model, options.checkpointing, options.checkpoint_every);
  std::vector<NamedTensor> held = share.held_of(module_weights(*model));
  std::vector<UnitStorage> base_storage;  // ZeRO-3: the 4-bit base's shards
  if (model->cfg.quantize.enabled()) {
    share.quantized_bytes = quantize_held_base(model, held, initial.get(), groups, options, base_storage);
    held = share.held_of(module_weights(*model));  // without the weights now in 4 bits
  }
  if (fully_shards(groups, options)) shard_fully(model, groups, options, held, initial.get(), base_storage, share);
  else share.weights = std::move(held);
  if (initial) share.initialized_bytes = initial->materialize(model, share.weights, options.device);
  return initial;
}

}  // namespace

ParallelModel parallelize(Gpt& model, const ProcessGroups& groups, const ParallelizeOptions& options,
                          const PartReader* files) {
  ParallelModel out;
  const std::unique_ptr<InitialParts> initial = lay_out(model, groups, options, files, out.share);
  if (initial) out.parts = std::make_unique<InitialParts>(initial->with_files(nullptr));  // `files` go with the build
  out.gradients = std::make_unique<GradientReducer>(groups, options.parallel, out.share);
  if (groups.pp())
    out.pipeline = std::make_unique<PipelineStages>(groups, options.parallel, options.device, out.share.layout.stages);
  return out;
}

RankShare parallelize_frozen(Gpt& model, const ProcessGroups& groups, ParallelizeOptions options,
                             const PartReader* files) {
  for (auto& p : model->parameters()) p.requires_grad_(false);
  options.checkpointing = CheckpointingPolicy::kNone;  // no backward to recompute for
  RankShare share;
  lay_out(model, groups, options, files, share);
  model->eval();
  return share;
}

bool rereads_parts(const ParallelModel& par, const PartReader& files) {
  if (!par.parts) return false;
  for (const auto& w : par.share.weights)
    if (files.covers(w.name) != PartReader::Coverage::kAll) return false;
  return true;
}

void reread_parts(ParallelModel& par, const PartReader& files) {
  const InitialParts parts = par.parts->with_files(&files);
  if (par.share.fully_sharded)
    par.share.fully_sharded->refill([&parts](const std::string& name, torch::Tensor& shard, int64_t first,
                                             int64_t count) { parts.fill_rows(name, shard, first, count); });
  else parts.refill(par.share.weights);
}

std::string describe_parallelism(const ProcessGroups& groups, const ParallelizeOptions& options,
                                 const ParallelModel& par) {
  if (!groups.distributed()) return "1 process";
  const Grid& grid = groups.grid();
  const GridCoord& at = groups.coord();
  const RankShare& share = par.share;
  // cp is named where it splits sequences.
  const std::string cp = grid.cp() > 1 ? fmt::format(" x cp {}", grid.cp()) : "";
  const std::string cp_at = grid.cp() > 1 ? fmt::format(" cp {}", at.cp) : "";
  std::string s = fmt::format("{} process(es) ({}), {}; grid dp {} x pp {}{} x tp {}, this rank dp {} pp {}{} tp {}",
                              groups.world().size, groups.world_comm()->backend_name(), groups.world().describe(),
                              grid.dp(), grid.pp(), cp, grid.tp(), at.dp, at.pp, cp_at, at.tp);
  if (groups.tp()) {
    int64_t split = 0;
    for (const auto& t : share.tensor_split) split += t.dim >= 0 ? 1 : 0;
    s += fmt::format("; tensor parallel: {} of {} parameter tensors split over {} ranks", split,
                     share.tensor_split.size(), grid.tp());
  }
  const RankLayout& l = share.layout;
  if (groups.cp())
    s += fmt::format("; context parallel: this rank holds chunks {} and {} of each sequence's {} (cp {}), attention {}",
                     l.chunks.first, l.chunks.second, l.chunks.count, grid.cp(),
                     options.parallel.cp_method == ContextMethod::kRing ? "passes keys and values round the ring"
                                                                        : "gathers the others' keys and values");
  if (groups.pp())
    s +=
        fmt::format("; pipeline: stage {} of {} runs blocks [{}, {}){}{}, {} schedule", at.pp, grid.pp(), l.stage.first,
                    l.stage.last, l.stage.embeds ? " and the embeddings" : "", l.stage.has_head ? " and the head" : "",
                    options.parallel.pp_schedule == PipelineSchedule::kGpipe ? "gpipe" : "1f1b");
  if (groups.ep())
    s += fmt::format(
        "; expert parallel: this rank holds experts {}-{} of each mixture layer's {} (ep {}), their "
        "gradients reduced over {} replica(s)",
        l.first_expert, l.first_expert + l.local_experts - 1, l.local_experts * grid.ep(), grid.ep(),
        l.expert_replicas);
  s += par.gradients->describe();
  if (!share.fully_sharded) return s;
  const std::string part = !groups.ep() ? fmt::format(" ({:.1f}% of the values)", 100.0 / groups.dp()->size())
                           : l.expert_replicas == 1
                               ? " (its experts whole: no other rank holds them)"
                               : fmt::format(" (its experts' 1/{}, over their replicas)", l.expert_replicas);
  return s + fmt::format(
                 "; ZeRO-3: this rank holds 1/{} of the rows of each of the {} parameter tensors{}{}, each unit's "
                 "weights gathered only while in use{}{}{}",
                 groups.dp()->size(), share.weights.size(), part,
                 share.quantized_bytes > 0 ? " and of the blocks of each 4-bit base tensor (model.quantize)" : "",
                 options.parallel.reshard_after_forward ? "" : " (kept from forward to backward)",
                 options.parallel.gather_dtype == GatherDtype::kBf16 ? ", in bf16" : "",
                 offloads_params(options) ? "; the shards (pinned), their gradients and the optimizer state in host "
                                            "memory, the update on the CPU (parallel.offload_params)"
                                          : "");
}

OptimizerPlacement rank_optimizer_placement(ParallelModel& par, const ParallelizeOptions& options,
                                            const std::vector<ParamGroup>& groups, const std::string& output_dir,
                                            bool device_named_cpu) {
  OptimizerPlacement where = optimizer_placement(options.parallel, options.device, output_dir, device_named_cpu);
  FullyShardedModel* sharded = par.share.fully_sharded.get();
  if (where.state != OptimizerPlacement::State::kFile || !sharded) return where;
  where.units = sharded->unit_parameters();
  for (const ParamGroup& g : groups)
    for (const auto& name : g.names)
      if (torch::Tensor c = sharded->keep_gather_copy(name); c.defined()) where.copies.emplace(name, std::move(c));
  return where;
}

}  // namespace gputrain
