// A check the multi-process CLI tests share: two checkpoints' tensor files hold
// the same tensors, whatever the parallel layout that wrote them.
#pragma once
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "checkpoint/training_checkpoint.h"
#include "test_util.h"

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

// Two checkpoint directories hold the same model (and, with `optimizer_state`, the same optimizer
// state), each joined from whatever files wrote it, within `tolerance`.
inline void check_same_model(const std::filesystem::path& expected, const std::filesystem::path& got, double tolerance,
                             bool optimizer_state = false) {
  auto tensors = [&](const std::filesystem::path& dir) {
    std::map<std::string, torch::Tensor> out;
    const auto list = optimizer_state ? gputrain::load_training_checkpoint(dir).optimizer_state
                                      : gputrain::read_checkpoint_model(dir);
    for (const auto& e : list) out[e.name] = e.tensor;
    return out;
  };
  const auto a = tensors(expected), b = tensors(got);
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    const auto it = b.find(name);
    REQUIRE(it != b.end());
    REQUIRE(t.sizes() == it->second.sizes());
    CHECK((t - it->second).abs().max().item<double>() <= tolerance);
  }
}

// The weight and optimizer files of two checkpoints (every model.* and optimizer.* file their
// manifests list) are the same, byte for byte; returns their names.
inline std::vector<std::string> check_same_state_files(const std::filesystem::path& a, const std::filesystem::path& b) {
  const auto files = read_json((a / "manifest.json").string())["files"];
  std::vector<std::string> names;
  for (const auto& [name, f] : files.items())
    if (name.rfind("model.", 0) == 0 || name.rfind("optimizer.", 0) == 0) names.push_back(name);
  REQUIRE(!names.empty());
  CHECK(read_json((b / "manifest.json").string())["files"].size() == files.size());
  for (const auto& name : names) {
    INFO(name);
    CHECK(read_file((a / name).string()) == read_file((b / name).string()));
  }
  return names;
}

}  // namespace gputrain::test
