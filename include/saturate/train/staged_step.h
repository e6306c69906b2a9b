// SPDX-License-Identifier: Apache-2.0
#pragma once
// StagedStep: the seam through which pipeline parallelism enters a training step. The Trainer
// holds one stage of the model (Model::pipeline_stage) and its optimizer; each step's forward
// and backward, and each evaluation batch, go through the seam instead of the model, which runs
// them as micro-batches over every stage's process (dist's PipelineStage). What a step decides
// from all parameters (the gradients' global norm for clipping) is summed across stages here.
//
//   auto staged = make_pipeline_step(*group, *stage, {micro_batches, schedule});   // dist
//   Trainer trainer(*stage, opts, device, memory.get());
//   trainer.set_staged_step(staged.get());

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace saturate {

struct EvalSums;
class PhaseTimer;
struct StepRecord;

class StagedStep {
 public:
  virtual ~StagedStep() = default;
  /// One step's forward and backward of the batch (x on the first stage, y on the last; every
  /// stage is given both) through all stages: this stage's parameters' gradients accumulate
  /// those of the batch's mean loss. Marks this stage's forward and backward compute and its
  /// communication (sends, and waits for a neighbour: the bubble) on `timer` (may be null).
  /// Returns the batch's mean loss, the same on every stage, as a 0-d float tensor on x's
  /// device. With `loss_scale` defined (fp16's loss scaler: a 0-d float tensor, the same on
  /// every stage), the backward starts from the loss times it, so every gradient is scaled.
  virtual at::Tensor forward_backward(const at::Tensor& x, const at::Tensor& y, StepRecord& r,
                                      PhaseTimer* timer, const at::Tensor& loss_scale) = 0;
  /// One evaluation batch through the stages, forward only: the last stage's sums, on every
  /// stage.
  virtual EvalSums evaluate(const at::Tensor& x, const at::Tensor& y) = 0;
  /// `value` (a 0-d tensor on this stage's device) summed over the stages (a collective: every
  /// stage calls it at the same point).
  virtual at::Tensor sum_across_stages(const at::Tensor& value) = 0;
  /// This process's stage, and how many there are.
  virtual int stage() const = 0;
  virtual int stages() const = 0;
  /// This stage's parameters whose gradients another stage also holds and counts in the global
  /// norm (a weight tied across the chain's ends: the last stage's copy): left out of this
  /// stage's share so that the norm counts each weight once.
  virtual std::vector<at::Tensor> counted_by_another_stage() { return {}; }
};

}  // namespace saturate
