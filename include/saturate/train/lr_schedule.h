// SPDX-License-Identifier: Apache-2.0
#pragma once
// Learning-rate schedule: linear warm-up to the peak, then constant or cosine decay to zero.
//
//   double lr = saturate::lr_at(/*step=*/10, /*total_steps=*/1000, opts.lr, /*warmup=*/20,
//                               ScheduleKind::kCosine);

#include <cstdint>

#include "saturate/train/train_options.h"

namespace saturate {

/// LR for 0-based `step` of `total_steps`. During warm-up it rises linearly from
/// peak/warmup_steps to the peak; a cosine schedule then decays to 0 at the last step.
double lr_at(int64_t step, int64_t total_steps, double peak_lr, int64_t warmup_steps,
             ScheduleKind schedule);

}  // namespace saturate
