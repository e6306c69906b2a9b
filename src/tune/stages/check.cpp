// SPDX-License-Identifier: Apache-2.0
// Stage "check": one step of one sample must run and fit, or nothing else can.
#include "tune_state.h"

#include "saturate/core/error.h"
#include "saturate/core/units.h"

namespace saturate::tune_detail {

void check(TuneState& s) {
  TrialRequest req;
  req.config = s.base;
  req.config.train.batch_size = 1;
  req.config.train.accumulate = 1;
  req.steps = 1;
  req.warmup_steps = 0;
  s.check_stop();
  const TrialOutcome t = s.runner.run(req);
  s.record("check", "one sample", req.config, t);
  if (s.safe(t)) return;
  const std::string where = format_bytes(s.target_bytes()) + " (" +
                            format_bytes(s.runner.memory_limit_bytes()) + " memory limit less the " +
                            std::to_string(static_cast<int>(s.o.search.reserve * 100 + 0.5)) +
                            "% reserve)";
  if (s.o.model_splits)
    throw DoesNotFit{"one sample does not fit one process in " + where +
                     ": only the model split over processes can train it (the ranks stage)"};
  SATURATE_CHECK(false, "tune: one sample does not fit in ", where,
                 "; raise --memory-limit or pick a smaller model");
}

}  // namespace saturate::tune_detail
