// SPDX-License-Identifier: Apache-2.0
// Stage "memory_savers": when the user's batch does not fit as one step, activation
// recomputation may beat accumulation: a few segment counts are tried at the full batch.
#include "tune_state.h"

#include "saturate/core/strings.h"
#include "saturate/core/units.h"

namespace saturate::tune_detail {

void memory_savers(TuneState& s) {
  const double before = TuneState::sps(s.current_out);
  if (s.current.train.accumulate <= 1) {
    s.finish_stage("memory_savers", before, before, false,
                   "not needed: each step of " + std::to_string(s.current.train.batch_size) +
                       " fits in memory at once");
    return;
  }
  std::vector<Candidate> candidates;
  for (int segments = 2; segments <= s.o.max_recompute_segments; segments *= 2) {
    RunConfig c = s.current;
    c.train.recompute_segments = segments;
    c.train.accumulate = 1;
    candidates.push_back({c, std::to_string(segments) + " recompute segments"});
  }
  const Pick best = s.pick_fastest("memory_savers", candidates, OnTrialError::kStop);
  const bool changed = best.config.describe() != s.current.describe();
  s.finish_stage("memory_savers", before, TuneState::sps(best.outcome), changed,
                 "accumulation " + std::to_string(s.current.train.accumulate) + "× " +
                     format_fixed(before, 1) + " samples/s; " + best.tried +
                     (changed ? ": recomputation wins" : ": kept accumulation"));
  s.adopt(best.config, best.outcome);
}

}  // namespace saturate::tune_detail
