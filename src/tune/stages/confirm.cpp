// SPDX-License-Identifier: Apache-2.0
// Stage "confirm": every stage kept the fastest of several noisy measurements, so the numbers
// it kept lean high (the winner's curse). The plan's numbers come from fresh runs of the tuned
// and the user's configuration, which nothing selected: two interleaved rounds, so that a moment
// of interference (another process taking the cores) cannot decide alone. Each configuration is
// reported by the mean of its rounds; the user's is restored only if it won both rounds.
#include <algorithm>
#include <sstream>

#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "tune_state.h"

namespace saturate::tune_detail {
namespace {

constexpr int kRounds = 2;

// The mean of the rounds' samples/s; an out-of-memory round makes the whole one so.
void fold(TrialOutcome& kept, const TrialOutcome& t, int round) {
  if (round == 0 || !t.fits) {
    kept = t;
    return;
  }
  if (!kept.fits) return;
  const double mean = (TuneState::sps(kept) * round + TuneState::sps(t)) / (round + 1);
  const int64_t peak =
      std::max(kept.measurement.peak_memory_bytes, t.measurement.peak_memory_bytes);
  kept = t;
  kept.measurement.samples_per_s = mean;
  kept.measurement.peak_memory_bytes = peak;
}

struct Rounds {
  TrialOutcome tuned, base;
  int base_wins = 0;
  std::string text;
};

Rounds run_rounds(TuneState& s, bool with_base) {
  Rounds r;
  std::ostringstream text;
  for (int round = 0; round < kRounds; ++round) {
    const TrialOutcome t = s.fresh(s.current, "confirm");
    fold(r.tuned, t, round);
    if (!t.fits) break;
    text << (round ? "; " : "") << format_fixed(TuneState::sps(t), 1);
    if (!with_base) continue;
    const TrialOutcome u = s.fresh(s.base, "confirm");
    fold(r.base, u, round);
    if (!u.fits) continue;
    text << " vs yours " << format_fixed(TuneState::sps(u), 1);
    if (s.safe(u) && s.better(u, t)) ++r.base_wins;
  }
  r.text = text.str();
  return r;
}

// The user's own configuration won every round: the plan keeps it (it needs no guard); the
// tuned evaluation batch stays.
void restore_base(TuneState& s, const TrialOutcome& base) {
  const int64_t eval_batch = s.current.train.eval_batch_size;
  s.current = s.base;
  s.current.train.eval_batch_size = eval_batch;
  s.current_out = base;
  s.set_effective_batch(EffectiveBatchOutcome::kUnchanged,
                        "the tuned configuration measured slower than yours");
  QualityCheck& q = s.plan.quality;
  q.accepted = true;
  q.status = QualityStatus::kNotRun;
  q.why = "nothing to check: the plan keeps your configuration (" + q.why +
          ", for the configuration not taken)";
}

}  // namespace

void confirm(TuneState& s) {
  const double before = TuneState::sps(s.current_out);
  if (!s.current_out.fits) {
    s.finish_stage("confirm", before, before, false,
                   "skipped: " + s.current.describe() + " ran out of memory in its trial, so "
                   "there is no measurement to confirm");
    return;
  }
  const bool with_base = s.base_fits && s.base.describe() != s.current.describe();
  const double step_s =
      static_cast<double>(s.current.train.batch_size) / std::max(1e-9, before);
  const double cost_s =
      static_cast<double>(s.o.measure_steps * kRounds * (with_base ? 2 : 1)) * step_s;
  if (cost_s > s.left_s()) {
    s.finish_stage("confirm", before, before, false,
                   "skipped: a fresh measurement (about " + format_fixed(cost_s, 0) +
                       " s) does not fit in the budget left; the stages' numbers stand");
    return;
  }
  const Rounds r = run_rounds(s, with_base);
  if (!r.tuned.fits) {
    s.finish_stage("confirm", before, before, false,
                   s.current.describe() + " ran out of memory when measured again");
    s.current_out = r.tuned;  // the memory check falls back to the last safe configuration
    return;
  }
  const std::string why = s.current.describe() + " measured again in " +
                          std::to_string(kRounds) + " rounds: " + r.text +
                          " samples/s (the stages' estimate " + format_fixed(before, 1) + ")";
  // The plan is the user's configuration: one measurement is both numbers, or the plan would
  // promise a speed-up from comparing a stage's timing with a fresh one.
  if (!with_base && s.base_fits) TuneState::set_measured(s.plan.baseline, r.tuned);
  if (with_base && r.base.fits) {
    TuneState::set_measured(s.plan.baseline, r.base);
    if (r.base_wins == kRounds) {
      s.finish_stage("confirm", before, TuneState::sps(r.base), true,
                     why + ": yours, " + s.base.describe() +
                         ", is faster beyond noise in every round, the plan keeps it");
      restore_base(s, r.base);
      return;
    }
  }
  s.finish_stage("confirm", before, TuneState::sps(r.tuned), false, why);
  s.current_out = r.tuned;
}

}  // namespace saturate::tune_detail
