// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the precision and memory-format stages share: one setting of the step tried at each
// candidate value at the current batch (or the largest half of it that fits); the fastest
// beyond noise is taken.
#include <string>
#include <vector>

#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "tune_state.h"

namespace saturate::tune_detail {

template <typename T>
void compare_setting(TuneState& s, const std::string& stage, T TrainOptions::*setting,
                     const std::vector<T>& values, OnTrialError on_error) {
  RunConfig at = s.current;
  TrialOutcome at_out = s.current_out;
  while (!at_out.fits && at.train.batch_size > 1) {
    at.train.batch_size /= 2;
    at_out = s.measured(at, stage);
  }
  if (!at_out.fits) return;  // the batch stage reports what fits
  std::vector<Candidate> candidates;
  for (const T& value : values) {
    if (value == at.train.*setting) continue;
    RunConfig c = at;
    c.train.*setting = value;
    candidates.push_back({c, to_string(value)});
  }
  const Pick best = s.pick_fastest(stage, at, at_out, candidates, on_error);
  const T& kept = s.current.train.*setting;
  const T& chosen = best.config.train.*setting;
  const bool changed = chosen != kept;
  // Both as measured by now: a winner's second reading also re-measured `at`.
  const double at_now = TuneState::sps(s.cached(at));
  const double before = at_now > 0 ? at_now : TuneState::sps(at_out);
  const double after = TuneState::sps(best.outcome);
  std::string why = to_string(kept) + " " + format_fixed(before, 1) + " samples/s at batch " +
                    std::to_string(at.train.batch_size) + "; " + best.tried;
  why += changed ? ": " + to_string(chosen) + " is faster by " + pct(after / before - 1.0)
                 : ": kept " + to_string(kept) + " (nothing faster by at least " +
                       pct(s.o.min_gain) + " beyond noise)";
  s.finish_stage(stage, before, after, changed, why);
  RunConfig next = s.current;
  next.train.*setting = chosen;
  if (s.base_fits) s.adopt(next, s.measured(next, stage));
  else s.current = next;
}

}  // namespace saturate::tune_detail
