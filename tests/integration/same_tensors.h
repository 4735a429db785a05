// A check the multi-process CLI tests share: two checkpoints' tensor files hold
// the same tensors, whatever the parallel layout that wrote them.
#pragma once
#include <catch2/catch.hpp>

#include <string>

#include "checkpoint/safetensors.h"

namespace gputrain::test {

// Every tensor of `expected` is in `got` with the same shape and values within `tolerance`.
inline void check_same_tensors(const std::string& expected_path, const std::string& got_path, double tolerance) {
  const auto expected = gputrain::read_safetensors(expected_path), got = gputrain::read_safetensors(got_path);
  REQUIRE(expected.tensors.size() == got.tensors.size());
  for (const auto& t : expected.tensors) {
    const torch::Tensor* other = got.find(t.name);
    REQUIRE(other != nullptr);
    INFO(t.name);
    REQUIRE(other->sizes() == t.tensor.sizes());
    CHECK((*other - t.tensor).abs().max().item<double>() < tolerance);
  }
}

}  // namespace gputrain::test
