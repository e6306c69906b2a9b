// SPDX-License-Identifier: Apache-2.0
// Stage "memory_format": the layout of image activations. The same math in another order, so
// only speed (and the peak, which the safety rule checks) decides; measured at the batch the
// precision stage used. A model written for one layout (a view() of a conv output, say) cannot
// run the other: that rules the layout out, not the tune.
#include "compare_setting.h"

namespace saturate::tune_detail {

void memory_format(TuneState& s) {
  compare_setting(s, "memory_format", &TrainOptions::memory_format, s.o.memory_formats,
                  OnTrialError::kSkip);
}

}  // namespace saturate::tune_detail
