// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checks run before the first training step, so that a misplaced tensor fails with a message
// that says what to do rather than deep inside a LibTorch kernel.
//
//   saturate::check_same_device(model->parameters(), {images, labels}, choice.device);

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <vector>

namespace saturate {

/// Verifies that every defined parameter and batch tensor is on `device` (a CUDA device without
/// an index matches any CUDA ordinal). Throws saturate::Error naming the first offender (its
/// index, shape and device) and the fix: "call model->to(<device>)" for parameters, "move the
/// batch with .to(<device>)" for batch tensors. Parameters spread over several devices are
/// rejected even when the first one matches. Undefined tensors are skipped.
void check_same_device(const std::vector<at::Tensor>& parameters,
                       const std::vector<at::Tensor>& batch, const c10::Device& device);

}  // namespace saturate
