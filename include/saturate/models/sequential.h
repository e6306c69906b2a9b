// SPDX-License-Identifier: Apache-2.0
#pragma once
// A torch::nn::Sequential stack as a saturate::Model, as the built-in CNNs and MLPs are, for
// models a program or a test assembles itself: its children are the pipeline layers
// (Model::pipeline_stage) and the recomputation segments' units.
//
//   torch::nn::Sequential net(torch::nn::Linear(64, 64), torch::nn::Tanh());
//   auto model = saturate::make_sequential_model("blocks", net);

#include <cstdint>
#include <memory>
#include <string>

#include <torch/nn/modules/container/sequential.h>

#include "saturate/models/model.h"

namespace saturate {

/// `net` as a Model named `name`; `forward_flops_per_sample` 0 when unknown.
std::unique_ptr<Model> make_sequential_model(const std::string& name, torch::nn::Sequential net,
                                             int64_t forward_flops_per_sample = 0);

}  // namespace saturate
