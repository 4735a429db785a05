// The CPU halves of the fused updates: the CUDA kernels' algorithm as a C++
// loop parallel over chunks of all tensors at once (at::parallel_for), so
// many small tensors do not each pay a parallel region.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "optim/fused_update.h"
#include "optim/quantization.h"

namespace gputrain {
namespace {

using kernels::AdamWScalars;

// Work units numbered across tensors: first[i] is tensor i's first unit.
struct UnitIndex {
  std::vector<int64_t> first;
  int64_t total = 0;
  template <class Items>
  UnitIndex(const Items& items, int64_t unit_size) {
    for (const auto& it : items) {
      first.push_back(total);
      total += (it.param.numel() + unit_size - 1) / unit_size;
    }
  }
  size_t owner(int64_t unit) const {
    return static_cast<size_t>(std::upper_bound(first.begin(), first.end(), unit) - first.begin() - 1);
  }
};

// p[i] as float and back; bf16 goes back with stochastic rounding.
template <bool kBf16>
struct ParamAccess {
  static float load(const void* base, int64_t i) {
    if constexpr (kBf16) return kernels::bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    else return static_cast<const float*>(base)[i];
  }
  static void store(void* base, int64_t i, float x, uint64_t seed) {
    if constexpr (kBf16)
      static_cast<uint16_t*>(base)[i] = kernels::float_to_bf16_stochastic(x, kernels::hash_bits(seed, i));
    else static_cast<float*>(base)[i] = x;
  }
};

// One contiguous fp32 span: restrict pointers (no aliasing) and
// -fno-math-errno (lib/CMakeLists.txt) let the compiler vectorize the loop;
// target_clones adds an AVX2 build picked at load time where the CPU has it.
__attribute__((target_clones("avx2", "default"))) void adamw_span_f32(float* __restrict p, const float* __restrict g,
                                                                      float* __restrict m, float* __restrict v,
                                                                      int64_t n, const AdamWScalars s, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    float mi = m[i], vi = v[i];
    p[i] = kernels::adamw_element(p[i], g[i] * scale, mi, vi, s);
    m[i] = mi;
    v[i] = vi;
  }
}

template <bool kBf16>
void adamw_loop(const std::vector<FusedAdamWItem>& items) {
  using P = ParamAccess<kBf16>;
  constexpr int64_t kChunk = 16384;
  const UnitIndex index(items, kChunk);
  at::parallel_for(0, index.total, 1, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const size_t ti = index.owner(unit);
      const FusedAdamWItem& it = items[ti];
      void* p = it.param.data_ptr();
      const void* g = it.grad.data_ptr();
      float* m = it.exp_avg.data_ptr<float>();
      float* v = it.exp_avg_sq.data_ptr<float>();
      const int64_t lo = (unit - index.first[ti]) * kChunk, hi = std::min(lo + kChunk, it.param.numel());
      const float scale = it.grad_scale.defined() ? *it.grad_scale.data_ptr<float>() : 1.0f;
      if constexpr (!kBf16) {
        adamw_span_f32(static_cast<float*>(p) + lo, static_cast<const float*>(g) + lo, m + lo, v + lo, hi - lo,
                       it.scalars, scale);
        if (it.bf16_copy.defined()) {  // while the span is in cache
          const float* updated = static_cast<const float*>(p);
          auto* copy = static_cast<uint16_t*>(it.bf16_copy.data_ptr());
          for (int64_t i = lo; i < hi; ++i) copy[i] = kernels::float_to_bf16_nearest(updated[i]);
        }
        continue;
      }
      for (int64_t i = lo; i < hi; ++i)
        P::store(p, i, kernels::adamw_element(P::load(p, i), P::load(g, i) * scale, m[i], v[i], it.scalars), it.seed);
    }
  });
}

template <bool kBf16>
void adamw8bit_loop(const std::vector<FusedAdamW8bitItem>& items, const QuantMaps& maps) {
  using P = ParamAccess<kBf16>;
  constexpr int64_t B = kernels::kQuantBlock;
  const float* code_m = maps.signed_code.data_ptr<float>();
  const float* code_v = maps.unsigned_code.data_ptr<float>();
  const NearestCodeTable& table_m = *maps.signed_table;  // make_quant_maps builds them for the CPU
  const NearestCodeTable& table_v = *maps.unsigned_table;
  const UnitIndex index(items, B);
  at::parallel_for(0, index.total, 16, [&](int64_t begin, int64_t end) {
    float m[B], v[B];
    for (int64_t unit = begin; unit < end; ++unit) {
      const size_t ti = index.owner(unit);
      const FusedAdamW8bitItem& it = items[ti];
      void* p = it.param.data_ptr();
      const void* g = it.grad.data_ptr();
      uint8_t* qm = it.exp_avg.data_ptr<uint8_t>();
      uint8_t* qv = it.exp_avg_sq.data_ptr<uint8_t>();
      float* am = it.absmax_avg.data_ptr<float>();
      float* av = it.absmax_avg_sq.data_ptr<float>();
      const int64_t block = unit - index.first[ti];
      const int64_t lo = block * B, n = std::min(B, it.param.numel() - lo);
      float max_m = 0, max_v = 0;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t i = lo + j;
        m[j] = code_m[qm[i]] * am[block];
        v[j] = code_v[qv[i]] * av[block];
        P::store(p, i, kernels::adamw_element(P::load(p, i), P::load(g, i), m[j], v[j], it.scalars), it.seed);
        max_m = std::max(max_m, std::fabs(m[j]));
        max_v = std::max(max_v, v[j]);
      }
      am[block] = max_m;
      av[block] = max_v;
      for (int64_t j = 0; j < n; ++j) {
        qm[lo + j] = table_m(max_m > 0 ? m[j] / max_m : 0.0f);
        qv[lo + j] = table_v(max_v > 0 ? v[j] / max_v : 0.0f);
      }
    }
  });
}

}  // namespace

void fused_adamw_cpu(const std::vector<FusedAdamWItem>& items) {
  if (items.empty()) return;
  if (items.front().param.scalar_type() == at::kBFloat16) adamw_loop<true>(items);
  else adamw_loop<false>(items);
}

void fused_adamw8bit_cpu(const std::vector<FusedAdamW8bitItem>& items, const QuantMaps& maps) {
  if (items.empty()) return;
  if (!maps.signed_table || !maps.unsigned_table)
    throw std::logic_error("fused_adamw8bit_cpu: maps without lookup tables (build them with make_quant_maps)");
  if (items.front().param.scalar_type() == at::kBFloat16) adamw8bit_loop<true>(items, maps);
  else adamw8bit_loop<false>(items, maps);
}

}  // namespace gputrain
