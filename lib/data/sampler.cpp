#include "data/sampler.h"

#include "data/mixture.h"
#include "data/rng.h"
#include "util/error.h"

namespace gputrain {

RandomPermutation::RandomPermutation(uint64_t n, uint64_t key) : n_(n) {
  int bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < n) bits += 2;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  for (int r = 0; r < 4; ++r) keys_[r] = mix_seed(key, static_cast<uint64_t>(r));
}

uint64_t RandomPermutation::operator()(uint64_t i) const {
  uint64_t x = i;
  do {  // cycle walking: the network permutes [0, 2^bits); repeat until back in [0, n)
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (uint64_t k : keys_) {
      const uint64_t next = left ^ (splitmix64(right ^ k) & half_mask_);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= n_);
  return x;
}

WindowSampler::WindowSampler(int64_t window_count, SamplerOptions o) : window_count_(window_count), o_(o) {
  if (window_count_ > 0) {
    per_rank_ = window_count_ / o_.world;
    if (per_rank_ == 0)
      throw data_error("the data has " + std::to_string(window_count_) + " windows, fewer than the " +
                       std::to_string(o_.world) + " data-parallel ranks\n    fix: use more data or fewer ranks");
  }
}

WindowSampler::WindowSampler(const WindowSource& source, SamplerOptions o)
    : WindowSampler(source.mixture() ? 0 : source.window_count(), o) {
  mixture_ = source.mixture();
  if (mixture_) window_count_ = mixture_->window_count();  // for the resume check; epochs are per source
}

int64_t WindowSampler::epoch(int64_t sample) const { return per_rank_ == 0 ? 0 : sample / per_rank_; }

uint64_t WindowSampler::window(int64_t sample) const {
  if (mixture_) {
    const auto [k, j] = mixture_->schedule().at(sample * o_.world + o_.rank);
    const int64_t n = mixture_->part_window_count(k);
    const RandomPermutation order(
        static_cast<uint64_t>(n),
        mix_seed(o_.seed, o_.stream, mix_seed(static_cast<uint64_t>(k), static_cast<uint64_t>(j / n))));
    return MixtureWindows::window_key(k, order(static_cast<uint64_t>(j % n)));
  }
  if (window_count_ == 0) return mix_seed(o_.seed, o_.stream, static_cast<uint64_t>(sample * o_.world + o_.rank));
  const int64_t e = sample / per_rank_;
  const int64_t position = (sample % per_rank_) * o_.world + o_.rank;
  const RandomPermutation order(static_cast<uint64_t>(window_count_),
                                mix_seed(o_.seed, o_.stream, static_cast<uint64_t>(e)));
  return order(static_cast<uint64_t>(position));
}

SamplerState WindowSampler::state(int64_t next_sample) const {
  return SamplerState{next_sample * o_.world, window_count_, o_.seed, o_.stream};
}

int64_t WindowSampler::resume_sample(const SamplerState& s) const {
  if (s.window_count != window_count_)
    throw data_error("the saved data position is for a dataset of " + std::to_string(s.window_count) +
                     " windows, but this one has " + std::to_string(window_count_) +
                     "\n    fix: resume with the same data files, model.seq_len, packing and span");
  if (s.seed != o_.seed || s.stream != o_.stream)
    throw data_error("the saved data position is for another data order (seed " + std::to_string(s.seed) +
                     ", this run " + std::to_string(o_.seed) + ")\n    fix: resume with the same run.seed");
  if (s.global_samples % o_.world != 0)
    throw data_error("the saved data position (" + std::to_string(s.global_samples) +
                     " samples) cannot be split evenly over " + std::to_string(o_.world) +
                     " ranks\n    fix: resume with a data-parallel degree that divides it");
  return s.global_samples / o_.world;
}

nlohmann::json sampler_state_to_json(const SamplerState& s) {
  return {
      {"global_samples", s.global_samples}, {"window_count", s.window_count}, {"seed", s.seed}, {"stream", s.stream}};
}

SamplerState sampler_state_from_json(const nlohmann::json& j) {
  try {
    SamplerState s;
    s.global_samples = j.at("global_samples").get<int64_t>();
    s.window_count = j.at("window_count").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    s.stream = j.at("stream").get<uint64_t>();
    if (s.global_samples < 0 || s.window_count < 0) throw data_error("negative count");
    return s;
  } catch (const std::exception& e) {
    throw data_error(std::string("the saved data position is malformed: ") + e.what());
  }
}

}  // namespace gputrain
