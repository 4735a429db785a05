// One optimizer as the rest of gputrain knows it, declared in the optimizer's own file (adamw.cpp,
// lion.cpp, ...) and registered by one line in optim/optimizer_specs.cpp. make_optimizer builds it
// and picks its kernel from here, validate asks it about the optim.* keys, `gputrain plan` its
// memory, ZeRO-3 its state blocks, `optim bench` its rows, and docs/training.md's table is printed
// from it (`gputrain optim list`, tested). Its keys themselves are typed in config/settings.h and
// described in config/schema.cpp, as every key is.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/recipe_rules.h"
#include "config/settings.h"
#include "model/gpt_shapes.h"
#include "optim/optimizer.h"

namespace gputrain {

struct OptimizerSpec {
  OptimName name;       // optim.name's typed value (the schema spells it)
  std::string summary;  // what it is, for the docs: "torch.optim.AdamW: decoupled weight decay, bias correction"
  // The optim.* keys only some optimizers read, that this one does: a key, or a prefix ending in '.'.
  std::vector<std::string> keys;
  // Whether `key` is one of `keys` or lies under one of them (optimizer_specs.cpp).
  bool reads(const std::string& key) const;

  // Its update kernels: foreach (ATen multi-tensor ops) where `foreach`; fused where `fused` says it
  // exists for the device (empty: no fused kernel at all).
  bool foreach = true;
  std::function<bool(const torch::Device&)> fused;

  // Memory: the rule in words (`gputrain plan`), and the state bytes of one trainable parameter of
  // this shape besides its int64 step counter (equal to what the built optimizer holds; tested).
  std::function<std::string(const OptimSettings&)> state_rule;
  std::function<int64_t(const OptimSettings&, const ParamShape&)> state_bytes;
  // State kept per block of `state_block` elements of the flattened parameter, for the parameters
  // `blocked` accepts (8-bit moments' scales): ZeRO-3 starts those shards on a block. Empty: none.
  int64_t state_block = 0;
  std::function<bool(const OptimSettings&, const std::string& parameter, int64_t numel)> blocked;

  // Builds it over `groups` with the chosen kernel; `sharding`: ZeRO-3 shards (optim/optimizer.h).
  std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup> groups, const OptimSettings& o, UpdateKernel kernel,
                                           const RowSharding* sharding)>
      make;
  // Its own rules over its keys (empty: none); `changed` as OptimizerRules::check's.
  std::function<std::vector<OptimizerProblem>(const OptimSettings& o,
                                              const std::function<bool(const std::string&)>& changed)>
      check;
  // `optim bench`'s rows besides one per kernel: settings variants, each with its label (empty: the
  // recipe's settings only).
  std::vector<std::pair<std::string, std::function<void(OptimSettings&)>>> bench_variants;
};

}  // namespace gputrain
