// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace saturate {

double lr_at(int64_t step, int64_t total_steps, double peak_lr, int64_t warmup_steps,
             ScheduleKind schedule) {
  if (warmup_steps > 0 && step < warmup_steps)
    return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (schedule == ScheduleKind::kConstant) return peak_lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress =
      std::clamp(static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  return 0.5 * peak_lr * (1.0 + std::cos(M_PI * progress));
}

}  // namespace saturate
