// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/train_options.h"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"

namespace saturate {

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adamw") return OptimizerKind::kAdamW;
  SATURATE_CHECK(false, "train: unknown optimizer '", name, "'", did_you_mean(name, {"sgd", "adamw"}));
  return OptimizerKind::kSgd;
}

std::string to_string(OptimizerKind kind) { return kind == OptimizerKind::kSgd ? "sgd" : "adamw"; }

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "constant") return ScheduleKind::kConstant;
  if (name == "cosine") return ScheduleKind::kCosine;
  SATURATE_CHECK(false, "train: unknown schedule '", name, "'",
                 did_you_mean(name, {"constant", "cosine"}));
  return ScheduleKind::kConstant;
}

std::string to_string(ScheduleKind kind) {
  return kind == ScheduleKind::kConstant ? "constant" : "cosine";
}

MemoryFormat parse_memory_format(const std::string& name) {
  if (name == "contiguous") return MemoryFormat::kContiguous;
  if (name == "channels-last") return MemoryFormat::kChannelsLast;
  SATURATE_CHECK(false, "train: unknown memory format '", name, "'",
                 did_you_mean(name, {"contiguous", "channels-last"}));
  return MemoryFormat::kContiguous;
}

std::string to_string(MemoryFormat format) {
  return format == MemoryFormat::kContiguous ? "contiguous" : "channels-last";
}

void TrainOptions::validate() const {
  SATURATE_CHECK(batch_size > 0, "train: --batch-size must be positive, got ", batch_size);
  SATURATE_CHECK(steps >= 0, "train: --steps must not be negative, got ", steps);
  SATURATE_CHECK(steps > 0 || epochs > 0, "train: --epochs must be positive, got ", epochs);
  SATURATE_CHECK(std::isfinite(lr) && lr > 0, "train: --lr must be a positive number, got ", lr);
  SATURATE_CHECK(momentum >= 0 && momentum < 1, "train: --momentum must be in [0, 1), got ",
                 momentum);
  SATURATE_CHECK(weight_decay >= 0, "train: --weight-decay must not be negative, got ",
                 weight_decay);
  SATURATE_CHECK(warmup_steps >= -1, "train: --warmup-steps must be >= 0 (or -1 for auto), got ",
                 warmup_steps);
  SATURATE_CHECK(std::isfinite(clip_grad_norm) && clip_grad_norm >= 0,
                 "train: --clip-grad-norm must be a number >= 0 (0: off), got ", clip_grad_norm);
  SATURATE_CHECK(timing_warmup_steps >= 0, "train: timing warm-up must not be negative, got ",
                 timing_warmup_steps);
  SATURATE_CHECK(accumulate >= 1, "train: --accumulate must be at least 1, got ", accumulate);
  SATURATE_CHECK(accumulate <= batch_size, "train: --accumulate (", accumulate,
                 ") is larger than --batch-size (", batch_size,
                 "); each micro-batch needs at least one sample");
  SATURATE_CHECK(precision != Precision::kAuto,
                 "train: precision must be resolved (resolve_precision) before training");
  SATURATE_CHECK(recompute_segments >= 0, "train: --recompute-segments must not be negative, got ",
                 recompute_segments);
  SATURATE_CHECK(std::isfinite(noise_scale_budget) && noise_scale_budget > 0,
                 "train: --noise-scale-budget must be a share above 0, got ",
                 noise_scale_budget);
  scaler.validate();
  SATURATE_CHECK(max_skipped_steps >= 1, "train: --max-skipped-steps must be at least 1, got ",
                 max_skipped_steps);
  SATURATE_CHECK(eval_batch_size > 0, "train: --eval-batch-size must be positive, got ",
                 eval_batch_size);
  SATURATE_CHECK(eval_every >= 0, "train: --eval-every must not be negative, got ", eval_every);
  if (adaptive_batch) {
    SATURATE_CHECK(noise_scale,
                   "train: --adaptive-batch follows the gradient noise scale; it cannot run with "
                   "--no-noise-scale");
  }
}

int64_t TrainOptions::total_steps(int64_t batches_per_epoch) const {
  return steps > 0 ? steps : epochs * batches_per_epoch;
}

int64_t TrainOptions::resolved_warmup_steps(int64_t total) const {
  if (warmup_steps >= 0) return std::min(warmup_steps, total);
  return std::min<int64_t>(100, total / 50);
}

void seed_everything(uint64_t seed) { torch::manual_seed(seed); }

}  // namespace saturate
