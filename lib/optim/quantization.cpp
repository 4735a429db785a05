#include "optim/quantization.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "optim_math.cuh"
#include "util/error.h"

namespace gputrain {

torch::Tensor dynamic_quant_map(bool is_signed) {
  // bitsandbytes.functional.create_dynamic_map(signed, max_exponent_bits=7, total_bits=8):
  // for each decade i, the midpoints of a linear grid on [0.1, 1] with
  // 2^i (signed) or 2^(i+1) (unsigned) intervals, scaled by 10^(i-6); the
  // signed map mirrors them. Plus 0 and 1: 256 codes either way.
  constexpr int kExponentBits = 7;
  std::vector<float> data;
  for (int i = 0; i < kExponentBits; ++i) {
    const int items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
    const double scale = std::pow(10.0, -(kExponentBits - 1) + i);
    for (int k = 0; k + 1 < items; ++k) {
      // torch.linspace(0.1, 1, items) in float32, then the midpoints.
      const float a = static_cast<float>(0.1 + 0.9 * k / (items - 1));
      const float b = static_cast<float>(0.1 + 0.9 * (k + 1) / (items - 1));
      const float mean = (a + b) / 2.0f;
      data.push_back(static_cast<float>(scale * mean));
      if (is_signed) data.push_back(static_cast<float>(-scale * mean));
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  if (data.size() != kernels::kQuantCodes) throw runtime_error("dynamic_quant_map: built a map of the wrong size");
  std::sort(data.begin(), data.end());
  return at::tensor(data, at::kFloat);
}

int NearestCodeTable::key_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint32_t key = (bits & 0x7fffffffu) >> 17;
  return static_cast<int>(key < kKeys ? key : kKeys - 1);
}

NearestCodeTable::NearestCodeTable(const torch::Tensor& map) {
  const at::Tensor c = map.to(at::kFloat).contiguous();
  std::memcpy(code_, c.data_ptr<float>(), sizeof code_);
  for (int neg = 0; neg < 2; ++neg) {
    for (uint32_t k = 0; k < kKeys; ++k) {
      // The bucket's extreme magnitudes; nearest is monotonic in x, so every
      // value inside maps to a code between the answers at its two ends.
      float a, b;
      const uint32_t lo_bits = k << 17, hi_bits = k == kKeys - 1 ? 0x7f7fffffu : ((k + 1) << 17) - 1;
      std::memcpy(&a, &lo_bits, sizeof a);
      std::memcpy(&b, &hi_bits, sizeof b);
      if (neg) {  // [-b, -a]
        const float lowest = -b, highest = -a;
        a = lowest;
        b = highest;
      }
      const uint8_t first = kernels::quantize_nearest(code_, a), last = kernels::quantize_nearest(code_, b);
      first_[neg][k] = first;
      count_[neg][k] = static_cast<uint8_t>(last - first + 1);
    }
  }
}

uint8_t NearestCodeTable::operator()(float x) const {
  const int k = key_of(x);
  const int neg = std::signbit(x) ? 1 : 0;
  int best = first_[neg][k];
  float best_distance = std::fabs(code_[best] - x);
  for (int c = best + 1, end = first_[neg][k] + count_[neg][k]; c < end; ++c) {
    const float d = std::fabs(code_[c] - x);
    if (d < best_distance) best = c, best_distance = d;  // ties keep the lower code
  }
  return static_cast<uint8_t>(best);
}

uint8_t zero_code(const torch::Tensor& map) {
  return kernels::quantize_nearest(map.contiguous().data_ptr<float>(), 0.0f);
}

BlockQuantized quantize_blockwise(const torch::Tensor& x, const torch::Tensor& map) {
  const at::Tensor flat = x.to(at::kFloat).contiguous().view({-1});
  const at::Tensor code = map.contiguous();
  const int64_t n = flat.numel(), B = kernels::kQuantBlock, blocks = (n + B - 1) / B;
  BlockQuantized q{at::empty(x.sizes(), at::kByte), at::empty({blocks}, at::kFloat)};
  const float* in = flat.data_ptr<float>();
  const float* c = code.data_ptr<float>();
  uint8_t* out = q.codes.data_ptr<uint8_t>();
  float* absmax = q.absmax.data_ptr<float>();
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * B, hi = std::min(n, lo + B);
    float m = 0;
    for (int64_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(in[i]));
    absmax[b] = m;
    for (int64_t i = lo; i < hi; ++i) out[i] = kernels::quantize_nearest(c, m > 0 ? in[i] / m : 0.0f);
  }
  return q;
}

torch::Tensor dequantize_blockwise(const BlockQuantized& q, const torch::Tensor& map) {
  const at::Tensor codes = q.codes.contiguous().view({-1}).to(at::kLong);
  const at::Tensor values = map.index_select(0, codes);
  const at::Tensor scales = q.absmax.repeat_interleave(kernels::kQuantBlock).slice(0, 0, codes.numel());
  return (values * scales).view(q.codes.sizes());
}

}  // namespace gputrain
