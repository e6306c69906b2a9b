// SPDX-License-Identifier: Apache-2.0
#pragma once
// GradientSync: the seam through which data parallelism enters a training step. The Trainer
// calls it around each micro-batch; the dist module implements it over c10d (gradients averaged
// across ranks while backward runs), tests with doubles. Without one, a step is one process's.
//
//   auto sync = make_data_parallel(*group);          // dist
//   Trainer trainer(*model, opts, device, memory, sync.get());

#include <vector>

#include <ATen/core/Tensor.h>

namespace saturate {

class Model;

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  /// Once, before the optimizer is built: the model is on its device in its final layout.
  /// Data parallelism makes every rank's parameters and buffers rank 0's here.
  virtual void attach(Model& model) = 0;
  /// Before each micro-batch's forward; `sync` is true for the last micro-batch of an optimizer
  /// step (the others accumulate locally and synchronise nothing).
  virtual void before_forward(bool sync) = 0;
  /// After that forward, before its backward.
  virtual void before_backward(bool sync) = 0;
  /// Before an evaluation (on every rank at the same point): the ranks evaluate one model,
  /// rank 0's, so data parallelism gives them its buffers (BatchNorm running statistics, which
  /// each rank updated from its own batches).
  virtual void before_evaluate() {}
  /// Processes whose gradients are averaged (1: none), and this one's place among them.
  virtual int world_size() const = 0;
  virtual int rank() const { return 0; }
  /// Element-wise sums over the ranks, in place (evaluation metrics of each rank's shard).
  virtual void sum_across_ranks(std::vector<double>& values) { (void)values; }
  /// Host milliseconds the last synchronised backward waited for gradient communication after
  /// its own compute was done (the part that did not overlap), then 0 until the next one.
  virtual double take_wait_ms() { return 0.0; }
  /// The gradient noise scale under data parallel: while on, each synchronised backward also
  /// sums the squares of this rank's own gradients before they are averaged (one more read of
  /// each bucket).
  virtual void measure_local_grad_sqr(bool on) { (void)on; }
  /// That sum for the last synchronised backward, averaged over the ranks (a collective: every
  /// rank calls it at the same point), a 0-d double tensor on the gradients' device (scaled by
  /// the loss scale², as the gradients were); then undefined until the next one. Undefined when
  /// not measured or when nothing was averaged.
  virtual at::Tensor take_local_grad_sqr() { return at::Tensor(); }
};

}  // namespace saturate
