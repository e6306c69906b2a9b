// SPDX-License-Identifier: Apache-2.0
#pragma once
// Options of a training run, with the defaults `saturate train` uses (its --help prints them
// from here).
//
//   TrainOptions opts;  opts.batch_size = 128;  opts.optimizer = Optimizer::kSgd;

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "saturate/train/grad_scaler.h"
#include "saturate/train/precision.h"

namespace saturate {

enum class OptimizerKind { kSgd, kAdamW };
enum class ScheduleKind { kConstant, kCosine };
/// Layout of 4-D (image) activations and convolution weights. Channels-last (NHWC) lets CPU and
/// tensor-core kernels vectorise over channels; which layout is faster depends on the model and
/// the hardware, so `tune` measures it. The math is the same either way.
enum class MemoryFormat { kContiguous, kChannelsLast };

/// "sgd" | "adamw"; throws saturate::Error with a suggestion otherwise.
OptimizerKind parse_optimizer(const std::string& name);
std::string to_string(OptimizerKind kind);
/// "constant" | "cosine"
ScheduleKind parse_schedule(const std::string& name);
std::string to_string(ScheduleKind kind);
/// "contiguous" | "channels-last"
MemoryFormat parse_memory_format(const std::string& name);
std::string to_string(MemoryFormat format);

struct TrainOptions {
  int64_t batch_size = 64;
  int64_t epochs = 1;          ///< used when steps == 0
  int64_t steps = 0;           ///< optimizer steps; > 0 overrides epochs
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  double lr = 3e-3;            ///< peak learning rate (after warm-up)
  double momentum = 0.9;       ///< SGD only
  double weight_decay = 1e-4;
  ScheduleKind schedule = ScheduleKind::kCosine;
  int64_t warmup_steps = -1;   ///< linear LR warm-up; -1 = 2% of the run, at most 100 steps
  uint64_t seed = 0;           ///< data order and (via seed_everything) initial weights
  int64_t timing_warmup_steps = 10;  ///< steps excluded from steady-state samples/s
  /// Evaluate at all: the validation and test splits at the end, and every eval_every steps.
  bool evaluate = true;
  int64_t eval_batch_size = 1000;  ///< samples per evaluation forward pass
  /// Evaluate the validation split (the test split when there is none) every this many
  /// optimizer steps as well as at the end; 0: only at the end. Needs `evaluate`.
  int64_t eval_every = 0;
  /// Stop once this quality is reached (empty: train to the end): "val_accuracy" (at or above)
  /// or "val_loss" (at or below) on the periodic evaluation — the validation split, which then
  /// must exist — or "loss", the training loss over the last kTargetLossSteps steps (at or
  /// below). A validation target with eval_every 0 evaluates every 2% of the run.
  std::string target_metric;
  double target_value = 0;
  /// Resolved precision (resolve_precision() turns kAuto into one of the others first).
  Precision precision = Precision::kFp32;
  /// Micro-batches per optimizer step: each step still consumes batch_size samples, in
  /// `accumulate` forward/backward passes of ceil(batch_size / accumulate), with each loss
  /// weighted by its share of the batch so the gradients equal one pass over the whole batch.
  int64_t accumulate = 1;
  /// Activation recomputation (PyTorch's "activation checkpointing"): the model's layers in this many recomputed segments (0 = off).
  int64_t recompute_segments = 0;
  /// Layout of image inputs and 4-D weights (channels-last needs [N, C, H, W] inputs).
  MemoryFormat memory_format = MemoryFormat::kContiguous;
  /// Data parallel: after every step the ranks agree whether any ran out of memory, and then
  /// every rank throws c10::OutOfMemoryError, so one rank's OOM ends the run on all of them at
  /// the same point instead of leaving them waiting in a collective (the tuner's trials set
  /// it). A rank whose forward runs out of memory stands in for the rest of its step (zero
  /// gradients through the same collectives). Costs one small all-reduce per step.
  bool agree_on_oom = false;
  /// Gradient clipping: > 0 scales the gradients down so their global L2 norm is at most this
  /// (after unscaling under fp16, after the all-reduce under data parallel); 0: off.
  double clip_grad_norm = 0;
  /// The gradient noise scale (telemetry/noise_scale.h), measured in the step wherever it has
  /// two gradients at the same weights: under accumulation, the first micro-batch's against the
  /// whole step's; under data parallel, this rank's against the all-reduced one. Norms are taken
  /// after fp16 unscaling and before clipping; one squared norm per parameter after the first
  /// micro-batch (two more under AdamW, every few measured steps, for the preconditioned
  /// value), within noise_scale_budget. false: not measured.
  bool noise_scale = true;
  /// The share of the run's step time measuring the noise scale may take on average. Where one
  /// measurement costs more than this share of a step (tiny steps, many parameters), only some
  /// steps are measured: each step earns this share of its time as credit, each measurement
  /// spends its host time, and a step is measured while the credit is not negative. The
  /// estimate averages steps, so thinning them widens its interval but does not bias it. Data
  /// parallel without accumulation measures every step (its small batch is a collective).
  /// >= 1: every step.
  double noise_scale_budget = 0.01;
  /// --adaptive-batch (train/adaptive_batch.h): every kAdaptEvery steps the batch may double,
  /// by taking two batches of the data source per step, when the noise scale says the
  /// doubled batch (at its measured samples/s in `adaptive_curve`) reaches a target sooner;
  /// the LR follows the gain rule. The run's length stays in samples: `steps` and `epochs`
  /// count steps of the starting batch, and the LR schedule runs over them.
  bool adaptive_batch = false;
  /// Measured samples/s per rank by batch per rank, ascending: the plan's goodput curve. The
  /// largest batch in it is the largest step run without accumulation (it fitted in the tune).
  /// Empty: the run measures its own, trying each doubling before it keeps it (adaptive_batch.h).
  std::vector<std::pair<int64_t, double>> adaptive_curve;
  /// Divergence under fp16: this many optimizer steps in a row skipped for non-finite
  /// gradients stop the run (the loss scale cannot recover it). Under fp32/bf16 one non-finite
  /// loss or gradient norm does.
  int64_t max_skipped_steps = 20;
  /// Dynamic loss scaling; used only with fp16 (bf16 and fp32 need none).
  GradScalerOptions scaler;

  /// Throws saturate::Error naming the first invalid field (sizes <= 0, lr <= 0, ...).
  void validate() const;
  /// Optimizer steps of the run: `steps`, else `epochs` of `batches_per_epoch` (the batch
  /// source's: a sharded or held-out-reduced split has fewer than the dataset).
  int64_t total_steps(int64_t batches_per_epoch) const;
  /// The warm-up length actually used for a run of `total_steps`.
  int64_t resolved_warmup_steps(int64_t total_steps) const;
};

/// Seeds LibTorch's CPU (and, when present, CUDA) generators; call before building the model
/// so the initial weights are reproducible.
void seed_everything(uint64_t seed);

}  // namespace saturate
