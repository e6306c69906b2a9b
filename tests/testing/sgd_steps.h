// SPDX-License-Identifier: Apache-2.0
#pragma once
// Options for a few plain-SGD steps whose outcome a test compares exactly: constant LR, no
// warm-up, no evaluation. Momentum and weight decay keep their defaults; a test that wants the
// bare update (parameters move by -lr × gradient) sets both to 0.

#include <cstdint>

#include "saturate/train/train_options.h"

namespace saturate::testing {

inline TrainOptions sgd_steps(int64_t batch_size, int64_t steps, double lr) {
  TrainOptions o;
  o.batch_size = batch_size;
  o.steps = steps;
  o.optimizer = OptimizerKind::kSgd;
  o.schedule = ScheduleKind::kConstant;
  o.warmup_steps = 0;
  o.lr = lr;
  o.evaluate = false;
  return o;
}

}  // namespace saturate::testing
