// SPDX-License-Identifier: Apache-2.0
// Stage "threads": the intra-op thread counts asked for, each measured; the fastest beyond
// noise is kept.
#include "tune_state.h"

#include "saturate/core/strings.h"

namespace saturate::tune_detail {

void threads(TuneState& s) {
  const double before = TuneState::sps(s.current_out);
  std::vector<Candidate> candidates;
  for (int n : s.o.threads) {
    if (n == s.current.threads) continue;
    RunConfig c = s.current;
    c.threads = n;
    candidates.push_back({c, count_of(n, "thread")});
  }
  const Pick best = s.pick_fastest("threads", candidates, OnTrialError::kRethrow);
  const bool changed = best.config.threads != s.current.threads;
  s.finish_stage("threads", before, TuneState::sps(best.outcome), changed,
                 best.tried + (changed ? ": " + count_of(best.config.threads, "thread")
                                       : ": kept the current threads"));
  s.adopt(best.config, best.outcome);
}

}  // namespace saturate::tune_detail
