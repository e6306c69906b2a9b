// SPDX-License-Identifier: Apache-2.0
// Stage "batch_size": the search (batch_search.h) finds the fastest safe batch; the
// effective-batch rule (effective_batch.h) applies it to the user's recipe, as a new batch with
// a rescaled learning rate or as the user's batch in micro-batches; the change must then beat
// the current configuration beyond noise, or the current one stays.
#include "tune_state.h"

#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/tune/effective_batch.h"

namespace saturate::tune_detail {
namespace {

// The search's own measurement of its chosen batch stands for that configuration.
TrialOutcome search_outcome(const BatchSearchResult& r) {
  TrialOutcome t;
  t.fits = true;
  for (const SearchTrial& s : r.trials)
    if (s.config.train.batch_size == r.chosen && s.outcome.fits &&
        !s.outcome.measurement.step_samples_per_s.empty())
      t = s.outcome;
  t.measurement.samples_per_s = r.samples_per_s;
  return t;
}

BatchSearchResult run_search(TuneState& s) {
  BatchSearchOptions so = s.o.search;
  so.before_trial = [&s] { s.check_stop(); };
  so.out_of_time = [&s] { return s.search_time_spent(); };
  if (s.o.budget_s > 0) so.max_step_s = s.o.budget_s * s.o.search_share / 40.0;
  BatchSearchResult r = search_batch_size(s.runner, s.current, so);
  for (const SearchTrial& t : r.trials) s.record("batch_size", t.purpose, t.config, t.outcome);
  return r;
}

}  // namespace

void batch_size(TuneState& s) {
  const double before = TuneState::sps(s.current_out);
  const BatchSearchResult r = run_search(s);
  s.search = r;
  const BatchChoice choice =
      choose_effective_batch(s.current, s.base, r.chosen, r.largest_safe, s.o.effective_batch);
  const RunConfig& next = choice.config;
  const std::string why = r.why + " (largest safe " + std::to_string(r.largest_safe) + ", " +
                          std::to_string(r.steps) + " probe steps, " + std::to_string(r.ooms) +
                          " out of memory)";
  const TrialOutcome& out = next.train.accumulate == 1 && next.train.batch_size == r.chosen
                                ? s.remember(next, search_outcome(r))
                                : s.measured(next, "batch_size");
  const bool moves = next.describe() != s.current.describe();
  if (moves && s.safe(s.current_out) && !s.better(out, s.current_out)) {
    const TrainOptions& t = next.train;
    s.set_effective_batch(
        EffectiveBatchOutcome::kUnchanged,
        "batch " + std::to_string(t.batch_size) +
            (t.accumulate > 1 ? " as " + std::to_string(t.accumulate) + " micro-batches"
                              : std::string()) +
            " measured " + format_fixed(TuneState::sps(out), 1) +
            " samples/s, not faster beyond noise than batch " +
            std::to_string(s.base.train.batch_size) + " at " + format_fixed(before, 1));
    s.finish_stage("batch_size", before, before, false,
                   why + "; kept your batch: " + s.plan.effective_batch_why);
    return;
  }
  s.set_effective_batch(choice.outcome, choice.why);
  s.finish_stage("batch_size", before, TuneState::sps(out), moves,
                 why + "; effective batch " + to_string(choice.outcome) + ": " + choice.why);
  s.adopt(next, out);
}

}  // namespace saturate::tune_detail
