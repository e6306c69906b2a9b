// SPDX-License-Identifier: Apache-2.0
// Stage "precision": the step's precision (fp32, bf16, fp16 with a loss scaler, ...), compared
// at the user's batch or the largest half of it that fits. The quality guard judges the math.
#include "compare_setting.h"

namespace saturate::tune_detail {

void precision(TuneState& s) {
  compare_setting(s, "precision", &TrainOptions::precision, s.o.precisions,
                  OnTrialError::kRethrow);
}

}  // namespace saturate::tune_detail
