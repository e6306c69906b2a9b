// SPDX-License-Identifier: Apache-2.0
// Stage "batch_size": the search (batch_search.h) finds the fastest safe batch; the
// effective-batch rule (effective_batch.h) applies it to the user's recipe, as a new batch with
// a rescaled learning rate or as the user's batch in micro-batches; the change must then beat
// the current configuration beyond noise, or the current one stays.
#include "tune_state.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/tune/effective_batch.h"
#include "saturate/tune/goodput.h"

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

// The gradient noise scale near the start of the user's run: steps of 4 × the user's batch, in
// micro-batches of the current micro-batch (which fits), so that each step has gradients of two
// sizes at the same weights. Four times the user's batch rather than the batch itself: the
// |G|² estimate is a difference of two norms whose noise falls with the larger batch, and φ is
// often several times the user's batch. Kind: AdamW's preconditioned value where resolved
// (it rarely is in so few steps), else the raw one.
NoiseScaleEstimate probe_noise(TuneState& s, std::string& kind) {
  kind = "raw";
  const int64_t b0 = s.base.train.batch_size;
  if (s.o.noise_probe_steps <= 0 || s.o.effective_batch != EffectiveBatch::kAuto ||
      !s.runner.measures_noise_scale())
    return {};
  RunConfig c = s.current;
  c.train.batch_size = 4 * b0;
  c.train.accumulate = 4 * s.current.train.accumulate;
  c.train.noise_scale = true;
  c.train.noise_scale_budget = 1;  // measuring is this run's purpose: every step
  // Within a budget, the probe takes at most a quarter of what is left of the stages' share,
  // at the user's measured samples/s; too few steps to resolve anything, and it is not run.
  int64_t steps = s.o.noise_probe_steps;
  const double sps = TuneState::sps(s.current_out);
  if (s.o.budget_s > 0 && sps > 0) {
    const double share_left = s.o.search_share * s.o.budget_s - s.elapsed_s();
    const double step_s = static_cast<double>(c.train.batch_size) / sps;
    steps = std::min<int64_t>(steps, static_cast<int64_t>(0.25 * share_left / step_s));
  }
  if (steps < 2 * kNoiseMinSteps) return {};
  s.check_stop();
  const TrialOutcome t = s.runner.run({c, steps, 1});
  s.record("batch_size", "noise scale", c, t);
  if (!t.fits) return {};
  const bool adam = c.train.optimizer == OptimizerKind::kAdamW;
  if (adam && t.measurement.noise_precond.is_resolved()) {
    kind = "AdamW-preconditioned";
    return t.measurement.noise_precond;
  }
  return t.measurement.noise;
}

// Goodput is decided near the user's batch, where the search (which starts large) rarely
// measures: the user's batch and 2, 4 and 8 times it, where they fit, each read twice (smallest
// to largest, then back) and taken as the mean. The ratios between these points decide the
// batch, and this machine drifts over a tune: one pass would credit the later, larger batches
// with the drift, and the user's batch as an earlier stage measured it would be older still.
std::vector<std::pair<int64_t, double>> near_user_curve(TuneState& s, int64_t largest_safe) {
  const int64_t b0 = s.base.train.batch_size;
  std::vector<RunConfig> configs;
  for (int64_t m : {1, 2, 4, 8}) {
    if (m * b0 > largest_safe) break;
    RunConfig c = s.current;
    c.train.batch_size = m * b0;
    c.train.accumulate = 1;
    // The user's batch only as the stages so far run it (not when it needs micro-batches).
    if (m == 1 && (s.current.describe() != c.describe() || !s.current_out.fits)) continue;
    configs.push_back(c);
  }
  std::vector<TrialOutcome> first;
  for (const RunConfig& c : configs) {
    if (s.search_time_spent()) {  // out of time: the user's batch as measured before, if it is
      if (c.describe() == s.current.describe()) first.push_back(s.current_out);
      break;
    }
    first.push_back(s.fresh(c, "batch_size"));
  }
  std::vector<std::pair<int64_t, double>> curve;
  for (size_t i = first.size(); i-- > 0;) {
    TrialOutcome t = first[i];
    if (!s.search_time_spent()) t = TuneState::mean_of(t, s.fresh(configs[i], "batch_size"));
    s.store(configs[i], t);
    if (t.fits) curve.emplace_back(configs[i].train.batch_size, TuneState::sps(t));
  }
  return curve;
}

BatchSearchResult run_search(TuneState& s) {
  BatchSearchOptions so = s.o.search;
  so.min_timed_s = s.o.min_timed_s;
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
  std::string kind;
  const NoiseScaleEstimate noise = probe_noise(s, kind);
  const BatchSearchResult r = run_search(s);
  s.search = r;
  const int64_t b0 = s.base.train.batch_size;
  BatchChoice choice =
      choose_effective_batch(s.current, s.base, r.chosen, r.largest_safe, s.o.effective_batch);
  if (noise.steps > 0) {
    std::vector<std::pair<int64_t, double>> curve = near_user_curve(s, r.largest_safe);
    // The search's points beyond them; those among them were read at another time.
    int64_t near_end = 0;
    for (const auto& q : curve) near_end = std::max(near_end, q.first);
    for (const CurvePoint& p : r.curve)
      if (p.batch_size > near_end) curve.emplace_back(p.batch_size, p.samples_per_s);
    std::sort(curve.begin(), curve.end());
    s.plan.goodput = choose_by_goodput(curve, b0, noise, kind, s.base.train.optimizer);
    // Only larger batches are judged by goodput; a smaller fastest batch keeps the user's
    // through accumulation as before.
    if (s.plan.goodput.usable && r.chosen >= b0)
      choice = goodput_batch(s.current, s.base, s.plan.goodput);
  }
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
