// SPDX-License-Identifier: Apache-2.0
#pragma once
// A copy of a model's tensors and an optimizer's state, kept in host memory outside LibTorch's
// allocators (so a snapshot never counts against the device budget it protects), and put back
// after a probe or a trial.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}

namespace saturate {
class Model;
}

namespace saturate::detail {

class StateSnapshot {
 public:
  /// Copies every state tensor of `model` and serialises `optimizer` (deep: its moment buffers
  /// are copied, not shared).
  StateSnapshot(Model& model, torch::optim::Optimizer& optimizer);
  /// Writes the saved values back in place (same tensors, same devices) and replaces the
  /// optimizer's state with the saved one. Gradients are dropped (set to none).
  void restore(Model& model, torch::optim::Optimizer& optimizer) const;

 private:
  struct Saved {
    std::vector<uint8_t> bytes;
  };
  std::vector<Saved> tensors_;
  std::string optimizer_state_;
};

}  // namespace saturate::detail
