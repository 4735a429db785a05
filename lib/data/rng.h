// Counter-based randomness for data: every window is a pure function of
// (seed, stream, index), so any batch can be produced by any worker thread in
// any order, and a run can later resume at batch k without replaying 0..k-1.
#pragma once
#include <cstdint>

namespace gputrain {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t mix_seed(uint64_t a, uint64_t b) { return splitmix64(a ^ splitmix64(b)); }
inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) { return mix_seed(mix_seed(a, b), c); }

// A small fast generator (xoshiro256**), seeded through splitmix64.
class DataRng {
 public:
  explicit DataRng(uint64_t seed) {
    for (auto& s : s_) s = seed = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0], s_[3] ^= s_[1], s_[1] ^= s_[2], s_[0] ^= s_[3], s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t below(uint64_t n) { return static_cast<uint64_t>(uniform() * static_cast<double>(n)) % n; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace gputrain
