// SPDX-License-Identifier: Apache-2.0
#pragma once
// Activation recomputation (what PyTorch calls activation checkpointing; saturate keeps the word
// "checkpoint" for saved training state): trade compute for memory by dropping a segment's
// activations in forward and recomputing them in backward (PyTorch's reentrant
// torch.utils.checkpoint, in C++).
//
//   at::Tensor h = saturate::recompute([&](const at::Tensor& x) { return block->forward(x); }, x);
//   loss_of(h).backward();  // block's parameters get their .grad as without recomputation

#include <functional>

#include <ATen/core/Tensor.h>

namespace saturate {

/// One recomputed segment: a pure function of its input apart from the RNG and module state.
using SegmentFn = std::function<at::Tensor(const at::Tensor&)>;

/// Runs fn(input) without keeping its intermediate activations (only `input` is kept) and runs
/// it again during backward to rebuild them. The recomputation sees the forward's RNG state (the
/// CPU generator and, when `input` is on CUDA, that device's default generator) and autocast
/// state (enabled flag and dtype for CPU and CUDA), so dropout masks and dtypes match; the
/// current RNG state is put back afterwards. Parameters used inside fn receive gradients through
/// a reentrant backward, so call backward() (not torch::autograd::grad) on the result. When
/// `input` does not require grad, a dummy requires-grad tensor keeps the graph edge so parameter
/// grads still flow. Outside grad mode (eval loops, NoGradGuard, InferenceMode) it just calls fn.
///
/// fn is copied and kept alive until the graph is freed. It runs twice per training step, so
/// module state it updates in forward (batch-norm running statistics) is updated twice, as with
/// PyTorch's checkpoint.
at::Tensor recompute(const SegmentFn& fn, const at::Tensor& input);

}  // namespace saturate
