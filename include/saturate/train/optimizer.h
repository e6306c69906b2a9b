// SPDX-License-Identifier: Apache-2.0
#pragma once
// The optimizer a run trains with, as the Trainer builds it.
//
//   auto opt = saturate::make_optimizer(options, model.parameters());

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "saturate/train/train_options.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace saturate {

/// SGD with momentum, or AdamW with its update fused into one kernel per step
/// (at::_fused_adamw_: the same update and state as torch::optim::AdamW, which it is a kind of,
/// with about an eighth of its memory passes and no temporaries).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o,
                                                        std::vector<at::Tensor> params);

}  // namespace saturate
