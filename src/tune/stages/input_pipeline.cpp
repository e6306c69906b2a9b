// SPDX-License-Identifier: Apache-2.0
// Stage "input_pipeline": hill-climbs the input pipeline's workers (1, 2, 4, ... up to
// max_workers, each with as many batches of prefetch) while data wait is a visible share of the
// step and each step up is faster beyond noise (tf.data's autotune idea on measured steps), then
// deepens the prefetch queue while the wait still shows.
#include <algorithm>
#include <sstream>

#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "tune_state.h"

namespace saturate::tune_detail {
namespace {

double wait_share(const TrialOutcome& t) {
  const Measurement& m = t.measurement;
  return m.phases.step_ms > 0 ? m.phases.data_wait_ms / m.phases.step_ms : 0.0;
}

std::string measured_text(const TrialOutcome& t) {
  return format_fixed(TuneState::sps(t), 1) + " samples/s (data wait " + pct(wait_share(t)) + ")";
}

void climb_workers(TuneState& s, Pick& best, std::ostringstream& tried) {
  for (int w = std::max(1, s.current.workers * 2); w <= s.o.max_workers; w *= 2) {
    RunConfig c = best.config;
    c.workers = w;
    c.prefetch = std::max(2, w);
    const TrialOutcome& out = s.measured(c, "input_pipeline");
    tried << (tried.tellp() > 0 ? ", " : "") << w << " workers " << measured_text(out);
    if (!s.better(out, best.outcome)) {
      // One worker only overlaps making a batch with the step; when making it dominates,
      // that gains no more than the step's small share, while two workers double the
      // supply. So one worker that is no slower does not end the climb.
      if (w == 1 && TuneState::sps(out) >= TuneState::sps(best.outcome) * (1.0 - s.o.min_gain))
        continue;
      break;
    }
    best.config = c;
    best.outcome = out;
    if (wait_share(out) <= s.o.data_wait_target) break;
  }
}

// Bursts of slow samples (large files, a busy disk) drain a short queue even when the workers
// keep up on average.
void deepen_prefetch(TuneState& s, Pick& best, std::ostringstream& tried) {
  for (int depth = best.config.prefetch * 2;
       best.config.workers > 0 && wait_share(best.outcome) > s.o.data_wait_target &&
       depth <= s.o.max_prefetch;
       depth *= 2) {
    RunConfig c = best.config;
    c.prefetch = depth;
    const TrialOutcome& out = s.measured(c, "input_pipeline");
    tried << ", prefetch " << depth << " " << measured_text(out);
    if (!s.better(out, best.outcome)) break;
    best.config = c;
    best.outcome = out;
  }
}

}  // namespace

void input_pipeline(TuneState& s) {
  const double before = TuneState::sps(s.current_out);
  const double share = wait_share(s.current_out);
  if (share <= s.o.data_wait_target) {
    s.finish_stage("input_pipeline", before, before, false,
                   "data wait is " + pct(share) + " of the step (target " +
                       pct(s.o.data_wait_target) + "): the input pipeline keeps up");
    return;
  }
  Pick best{s.current, s.current_out, ""};
  std::ostringstream tried;
  climb_workers(s, best, tried);
  deepen_prefetch(s, best, tried);
  const RunConfig& b = best.config;
  const bool changed = b.workers != s.current.workers || b.prefetch != s.current.prefetch;
  const std::string setting =
      std::to_string(b.workers) + " workers, prefetch " + std::to_string(b.prefetch);
  s.finish_stage("input_pipeline", before, TuneState::sps(best.outcome), changed,
                 "data wait " + pct(share) + " of the step with " +
                     std::to_string(s.current.workers) + " workers; " + tried.str() +
                     (changed ? ": " + setting
                              : ": kept " + std::to_string(s.current.workers) + " workers"));
  s.adopt(best.config, best.outcome);
}

}  // namespace saturate::tune_detail
