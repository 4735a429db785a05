// Per-element optimizer math shared by the CUDA kernels and their CPU
// references in lib/optim (compiled by both nvcc and g++), so the two can only
// differ in the order of floating-point operations, never in the formula.
//
// bf16 values are handled as their raw 16 bits (uint16_t): the same code
// works on the host and the device without either side's bf16 type.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GT_HOST_DEVICE inline
#endif

namespace gputrain::kernels {

// Scalars of one AdamW update of one tensor, folded on the host (no per-element pow).
struct AdamWScalars {
  float beta1;
  float beta2;
  float eps;
  float step_size;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float decay;                  // 1 - lr * weight_decay (decoupled weight decay)
};

// One AdamW element, in the order torch.optim.AdamW uses:
// p *= 1 - lr*wd; m = lerp(m, g, 1-b1); v = b2 v + (1-b2) g^2;
// p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps).
GT_HOST_DEVICE float adamw_element(float p, float g, float& m, float& v, const AdamWScalars& s) {
  p *= s.decay;
  m += (1.0f - s.beta1) * (g - m);
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
  return p - s.step_size * m / denom;
}

// Which type a kernel's parameters and gradients are (moments are always fp32).
enum class ParamType : int { kFloat32 = 0, kBFloat16 = 1 };

// --- bf16 -----------------------------------------------------------------------

GT_HOST_DEVICE float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Rounds x to bf16 stochastically: adding 16 uniform random bits below the
// kept mantissa and truncating rounds up with probability equal to the
// distance to the lower neighbour, so the rounding is unbiased on average.
// NaN and inf pass through unchanged (quiet).
GT_HOST_DEVICE uint16_t float_to_bf16_stochastic(float x, uint32_t random_bits) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u) return static_cast<uint16_t>((u >> 16) | ((u & 0xffffu) ? 0x40u : 0u));
  u += random_bits & 0xffffu;
  return static_cast<uint16_t>(u >> 16);
}

// Rounds x to the nearest bf16, ties to even: the conversion ATen's .to(bf16)
// (and so autocast's weight cast) makes, for bf16 mixed precision's weight
// copies (fused AdamW). NaN becomes bf16's quiet NaN, as in c10::BFloat16.
GT_HOST_DEVICE uint16_t float_to_bf16_nearest(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// A stateless hash of (seed, index) to 32 random bits (splitmix64's
// finalizer): every element of every step gets independent bits, with no RNG
// state to carry, on any thread and on either device.
GT_HOST_DEVICE uint32_t hash_bits(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<uint32_t>(z >> 32);
}

// --- 8-bit block-wise quantization (bitsandbytes' dynamic map) -------------------

constexpr int kQuantBlock = 256;  // elements sharing one absmax
constexpr int kQuantCodes = 256;

// The code nearest to x in a sorted table of 256 values (binary search for
// code[lo] < x <= code[hi], then the closer of the two; ties go to the lower).
GT_HOST_DEVICE uint8_t quantize_nearest(const float* code, float x) {
  int lo = 0, hi = kQuantCodes - 1;
  if (x <= code[0]) return 0;
  if (x >= code[hi]) return static_cast<uint8_t>(hi);
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (code[mid] < x) lo = mid;
    else hi = mid;
  }
  return static_cast<uint8_t>(x - code[lo] <= code[hi] - x ? lo : hi);
}

}  // namespace gputrain::kernels
