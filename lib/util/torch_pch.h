// Precompiled header: the heavy LibTorch and standard headers most files use.
#pragma once
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
