// SPDX-License-Identifier: Apache-2.0
#pragma once
// Pipeline parallelism by layers (issue 19): a model's chain of layers (Model::pipeline_layers)
// split into S contiguous stages, one per rank of a group, stage s on rank s. Each training
// step's batch runs as M micro-batches through them: activations go forward and their gradients
// back over c10d point to point (Gloo on CPU, NCCL on CUDA); the last stage takes the loss.
//
//   GPipe: every micro-batch's forward, then every backward. The bubble is (S−1)/(M+S−1) of
//          the step, and stage s holds the activations of all M micro-batches.
//   1F1B:  stage s runs min(S−1−s, M) forwards, then alternates one forward with one backward,
//          then drains the backwards: the same bubble, but at most S−s micro-batches' activations
//          held (PipeDream-Flush).
//
//   const auto spans = split_layers_evenly(model->pipeline_layers(), group.world_size());
//   auto stage = model->pipeline_stage(spans[rank].first, spans[rank].second);
//   PipelineStage pipe(group, *stage, {/*micro_batches=*/4, PipelineSchedule::k1F1B});
//   for (each batch) { zero the stage's grads; pipe.forward_backward(x, y); step its optimizer; }

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "saturate/train/trainer.h"

namespace saturate {

class DeviceMemory;
class DistGroup;
class Model;
class PhaseTimer;
class StagedStep;

enum class PipelineSchedule { kGPipe, k1F1B };
/// "gpipe" | "1f1b"; anything else is a saturate::Error naming them.
PipelineSchedule parse_pipeline_schedule(const std::string& name);
std::string to_string(PipelineSchedule schedule);

/// [begin, end) of each of `stages` contiguous spans of `layers` layers, near-equal in count
/// (the first ones one longer). saturate::Error for fewer than 1 stage, more stages than layers,
/// or a model that cannot be split (0 layers).
std::vector<std::pair<int64_t, int64_t>> split_layers_evenly(int64_t layers, int stages);

/// `--pipeline-split`: "balanced", "even", or each stage's layer count in order ("1,2,2"): the
/// counts, empty for balanced and even. saturate::Error naming `what` (the flag or plan field)
/// for anything else, or counts that are not `stages` positive integers.
std::vector<int64_t> parse_pipeline_split(const std::string& split, int stages,
                                          const std::string& what);
/// The spans [begin, end) of `counts` (parse_pipeline_split's); saturate::Error when they do
/// not add up to the model's `layers`.
std::vector<std::pair<int64_t, int64_t>> spans_of_layer_counts(const std::vector<int64_t>& counts,
                                                               int64_t layers);

/// One layer of a model's chain as profile_layers() measured it.
struct LayerCost {
  double ms = 0;                 ///< forward and backward of the layer, median of the repeats
  /// What its forward leaves held for its backward at the profiled batch: measured (the live
  /// bytes its forward added: its output and the tensors autograd saved) when profiled with a
  /// DeviceMemory of the model's device; else its output's size, a lower bound.
  int64_t activation_bytes = 0;
  int64_t param_bytes = 0;       ///< its parameters
};

/// Times each layer of `model`'s chain (Model::pipeline_layers) forward and backward with real
/// steps on `inputs`, one layer at a time, each fed the previous one's output: the median of
/// `repeats` after one warm-up. With `memory` (of the device the model is on), each layer's
/// activation bytes are measured in the warm-up. saturate::Error for a model that cannot be
/// split.
std::vector<LayerCost> profile_layers(Model& model, const at::Tensor& inputs, int repeats = 5,
                                      DeviceMemory* memory = nullptr);

/// A split of a chain into stages, with what each stage is predicted to cost.
struct StageSplit {
  std::vector<std::pair<int64_t, int64_t>> spans;  ///< [begin, end) per stage
  std::vector<double> ms;                          ///< predicted forward + backward per stage
  std::vector<int64_t> bytes;                      ///< predicted memory per stage
  double slowest_ms = 0;
};

/// The contiguous split into `stages` that minimises the slowest stage's time (torchgpipe's
/// balance by time), subject to each stage's memory — its parameters × `param_scale` (weights,
/// gradients and optimizer state: 2 for SGD, 4 for Adam) plus its layers' activations for the
/// whole batch, as GPipe holds them — within `memory_limit_bytes` (0: no limit). saturate::Error
/// naming the limit when no split fits, and for the bad inputs of split_layers_evenly.
StageSplit split_layers_balanced(const std::vector<LayerCost>& layers, int stages,
                                 int64_t memory_limit_bytes, double param_scale);

/// The share of a step a balanced pipeline of `stages` idles for with `micro_batches` per step:
/// (S − 1)/(M + S − 1), GPipe's and 1F1B's alike.
inline double pipeline_bubble(int64_t stages, int64_t micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

struct PipelineOptions {
  int64_t micro_batches = 1;  ///< M ≥ 1, at most the batch size
  PipelineSchedule schedule = PipelineSchedule::kGPipe;
};

/// What one step did on this stage.
struct PipelineStepStats {
  double loss = 0;          ///< the batch's mean loss (from the last stage, on every stage)
  double compute_ms = 0;    ///< forward and backward of this stage's layers
  double wait_ms = 0;       ///< blocked receiving activations or gradients (the bubble here)
  int64_t most_held = 0;    ///< the most micro-batches whose activations were held at once
};

class PipelineStage {
 public:
  /// `stage` is this rank's layers (Model::pipeline_stage); `group` the pipeline's ranks, in
  /// stage order. saturate::Error for M < 1.
  PipelineStage(DistGroup& group, Model& stage, PipelineOptions options);

  /// One step's forward and backward. The first stage reads `inputs`, the last `targets` (the
  /// others may pass undefined tensors); both are split into M micro-batches along dim 0. The
  /// stage's parameters' gradients accumulate the gradient of the batch's mean loss (each
  /// micro-batch's mean weighted by its share of the batch), as one process's backward of the
  /// whole batch would give; zero them before. A batch smaller than M (an epoch's last) runs
  /// as one micro-batch a sample.
  /// With `timer`: this stage's forward and backward compute, and its sends and waits (as
  /// communication), marked as they happen.
  /// With `loss_scale` (a 0-d float tensor): the last stage's backward starts from each
  /// micro-batch's loss times it (fp16's loss scaling); the loss reported is unscaled.
  PipelineStepStats forward_backward(const at::Tensor& inputs, const at::Tensor& targets,
                                     PhaseTimer* timer = nullptr,
                                     const at::Tensor& loss_scale = at::Tensor());

  /// Evaluation of one batch through the stages, forward only (inference mode), in the same M
  /// micro-batches: the sums of train/trainer.h's eval_sums over the batch, from the last stage,
  /// on every stage. The stage's training mode is left to the caller (model.train(false)).
  EvalSums evaluate(const at::Tensor& inputs, const at::Tensor& targets);

 private:
  DistGroup& group_;
  Model& stage_;
  PipelineOptions options_;
  int index_ = 0, count_ = 1;
  bool tied_agreed_ = false;  ///< the two ends have agreed how many elements they tie
};

/// The trainer's seam (train/staged_step.h) over a PipelineStage of `stage` on `group` (the
/// pipeline's stages, in order): set it with Trainer::set_staged_step on a Trainer of `stage`.
/// With `replicas` (this stage on each replica of the pipeline, in replica order; a group of
/// more than one), data parallel too: replica 0's weights at the start, and after each step's
/// flush the stage's gradients (and the loss) averaged across the replicas in one all-reduce.
/// `group`, `stage` and `replicas` must outlive it.
std::unique_ptr<StagedStep> make_pipeline_step(DistGroup& group, Model& stage,
                                               PipelineOptions options,
                                               DistGroup* replicas = nullptr);

}  // namespace saturate
