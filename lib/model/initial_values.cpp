#include "model/initial_values.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

namespace gputrain {
namespace {

using Counter = std::array<uint32_t, 4>;

// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): ten
// rounds of two 32x32->64 multiplies, the counter mixed under a key bumped by Weyl constants.
Counter philox(Counter c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53} * c[0], p1 = uint64_t{0xCD9E8D57} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += 0x9E3779B9;
    k1 += 0xBB67AE85;
  }
  return c;
}

// 53 random bits of two words as a double in [0, 1).
double unit_interval(uint32_t hi, uint32_t lo) {
  return static_cast<double>((uint64_t{hi} << 21) ^ (lo >> 11)) * 0x1.0p-53;
}

// FNV-1a: the parameter's name as 64 bits of the key.
uint64_t name_hash(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// The random value of whole element `index` (its own counter: no element's value depends on another's).
double random_value(InitialDistribution::Kind kind, uint64_t key, uint64_t index) {
  const Counter x = philox({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0x67707472u, 0},
                           static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
  const double u = unit_interval(x[0], x[1]);
  if (kind == InitialDistribution::Kind::kUniform) return 2 * u - 1;
  // Box-Muller on (0, 1] x [0, 1): a standard normal.
  return std::sqrt(-2 * std::log(1 - u)) * std::cos(2 * std::numbers::pi * unit_interval(x[2], x[3]));
}

}  // namespace

InitialDistribution initial_distribution(const std::string& name, at::IntArrayRef shape, const ModelSettings& cfg) {
  using Kind = InitialDistribution::Kind;
  const double std = 0.02;
  if (name.ends_with(".lora_A"))
    return {Kind::kUniform, shape.size() == 2 && shape[1] > 0 ? 1.0 / std::sqrt(static_cast<double>(shape[1])) : 0.0};
  if (name.ends_with(".lora_B") || name.ends_with(".bias")) return {Kind::kConstant, 0.0};
  if (name.ends_with("c_proj.weight")) return {Kind::kNormal, std / std::sqrt(2.0 * static_cast<double>(cfg.n_layer))};
  if (shape.size() >= 2) return {Kind::kNormal, std};  // linear and embedding weights
  return {Kind::kConstant, 1.0};                       // norm scales
}

WholeIndex whole_index(at::IntArrayRef shape) {
  const int64_t rows = shape.empty() ? 1 : shape[0];
  const int64_t cols = rows > 0 && !shape.empty() ? c10::multiply_integers(shape) / rows : 1;
  return {at::arange(rows, at::kLong), at::arange(cols, at::kLong), cols};
}

void fill_initial(torch::Tensor out, const std::string& name, const InitialDistribution& d, uint64_t seed,
                  const WholeIndex& at) {
  torch::NoGradGuard no_grad;
  const int64_t R = at.rows.numel(), C = at.cols.numel();
  if (out.numel() != R * C)
    throw std::logic_error("fill_initial: '" + name + "' holds " + std::to_string(out.numel()) + " elements, not " +
                           std::to_string(R) + " x " + std::to_string(C));
  const torch::Tensor rows = at.rows.to(at::kLong).contiguous().cpu(), cols = at.cols.to(at::kLong).contiguous().cpu();
  const int64_t* row = rows.data_ptr<int64_t>();
  const int64_t* col = cols.data_ptr<int64_t>();
  const uint64_t key = seed ^ name_hash(name);
  torch::Tensor flat = out.view({R, C});
  // Rows in pieces of about 4 MiB of fp32, each computed on the host and rounded once to fp32 (a bf16
  // model gets the fp32 weights rounded, as before), then copied into place.
  const int64_t piece = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(C, 1));
  for (int64_t r0 = 0; r0 < R; r0 += piece) {
    const int64_t n = std::min(piece, R - r0);
    torch::Tensor values = at::empty({n, C}, at::kFloat);
    float* v = values.data_ptr<float>();
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t r = row[r0 + i];
        for (int64_t j = 0; j < C; ++j) {
          double x = 0;  // padding rows stay zero
          if (r >= 0) {
            x = d.kind == InitialDistribution::Kind::kConstant
                    ? d.value
                    : d.value * random_value(d.kind, key, static_cast<uint64_t>(r * at.whole_cols + col[j]));
          }
          v[i * C + j] = static_cast<float>(x);
        }
      }
    });
    flat.narrow(0, r0, n).copy_(values);
  }
}

}  // namespace gputrain
