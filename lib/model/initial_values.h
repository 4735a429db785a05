// A model's initial weights as a pure function of (seed, parameter name, element of the whole
// parameter): a counter-based generator (Philox 4x32-10, keyed by the seed and the name, counting
// elements) gives every element its own random numbers, so any part of a parameter (a tensor-parallel
// slice, a ZeRO-3 shard's rows) is computed alone and equals the same part of one process's weights,
// bit for bit, whatever the world size or layout.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "config/settings.h"

namespace gputrain {

// What a parameter starts as.
struct InitialDistribution {
  enum class Kind { kNormal, kUniform, kConstant } kind = Kind::kConstant;
  double value = 0;  // the normal's standard deviation, the uniform's bound (-b, b), or the constant
};

// GPT-2's initialization for every architecture: N(0, 0.02) for matrices (embeddings, linear layers,
// the router), residual projections (attn.c_proj, mlp.c_proj, experts' c_proj) N(0, 0.02 / sqrt(2 x
// n_layer)), zero biases, norm scales 1; LoRA's A Kaiming-uniform (bound 1/sqrt(in)), its B zero.
// `shape` is the whole parameter's.
InitialDistribution initial_distribution(const std::string& name, at::IntArrayRef shape, const ModelSettings& cfg);

// Which elements of a whole parameter (rows x columns, a 1-D one a column of rows) a tensor holds:
// element (i, j) is whole element (rows[i], cols[j]); rows[i] < 0 marks a padding row (zeros).
struct WholeIndex {
  torch::Tensor rows, cols;  // int64, 1-D
  int64_t whole_cols = 1;
};
// The index of the whole parameter of `shape`: every row and column.
WholeIndex whole_index(at::IntArrayRef shape);

// Fills `out` (any device and floating dtype, shaped [rows, cols] or as the parameter's part) with
// its elements' initial values under `seed`, computed in double on the host and rounded once.
void fill_initial(torch::Tensor out, const std::string& name, const InitialDistribution& d, uint64_t seed,
                  const WholeIndex& at);

}  // namespace gputrain
