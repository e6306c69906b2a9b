// SPDX-License-Identifier: Apache-2.0
// Stage "baseline": the user's configuration as given, measured; every later number is
// compared with it.
#include "tune_state.h"

#include "saturate/core/strings.h"
#include "saturate/core/units.h"

namespace saturate::tune_detail {

void baseline(TuneState& s) {
  s.adopt(s.base, s.measured(s.base, "baseline"));
  s.base_fits = s.current_out.fits;
  TuneState::set_measured(s.plan.baseline, s.current_out);
  const double sps = TuneState::sps(s.current_out);
  const std::string why =
      s.base_fits ? s.base.describe() + ": " + format_fixed(sps, 1) + " samples/s, peak " +
                        format_bytes(s.current_out.measurement.peak_memory_bytes) +
                        breakdown(s.current_out.measurement)
                  : s.base.describe() + " runs out of memory under " +
                        format_bytes(s.runner.memory_limit_bytes()) + ": memory binds";
  s.finish_stage("baseline", 0, sps, false, why);
}

}  // namespace saturate::tune_detail
