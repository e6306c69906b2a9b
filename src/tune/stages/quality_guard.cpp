// SPDX-License-Identifier: Apache-2.0
// Stage "quality_guard": short trainings of the user's optimisation (two seeds, for the metric's
// own noise) and of the tuned candidates, from the tuned configuration back towards the user's
// (first the effective-batch change undone, then the precision), compared on held-out data. The
// first candidate that passes is the plan; when none does, or the runs cannot be afforded or
// cannot judge, the plan falls back to the user's optimisation with the math-preserving
// settings. A batch chosen by goodput is judged at equal wall time and, when rejected, the
// guard searches down the goodput curve with φ corrected by what the run measured (at most
// kGoodputMaxBranches batches) before undoing the batch change. The decisions are
// guard_rules.h's and goodput.h's.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/tune/goodput.h"
#include "saturate/tune/guard_rules.h"
#include "saturate/tune/effective_batch.h"
#include "tune_state.h"

namespace saturate::tune_detail {
namespace {

using detail::concat;

// The fall-back: the user's optimisation, measured, with why the guard gave up.
void give_up(TuneState& s, const RunConfig& ref, QualityStatus status, const std::string& why,
             const std::string& why_policy) {
  const double after = TuneState::sps(s.current_out);
  QualityCheck& q = s.plan.quality;
  q.status = status;
  q.why = why;
  const TrialOutcome& out = s.measured(ref, "quality_guard");
  s.set_effective_batch(ref.train.accumulate > 1 ? EffectiveBatchOutcome::kKept
                                                 : EffectiveBatchOutcome::kUnchanged,
                        why_policy);
  s.adopt(ref, out);
  s.finish_stage("quality_guard", after, TuneState::sps(s.current_out), true, q.why);
}

std::vector<RunConfig> candidates_for(const TuneState& s, const RunConfig& ref) {
  std::vector<RunConfig> out = {s.current};
  if (s.plan.effective_batch == EffectiveBatchOutcome::kLrRescaled ||
      s.plan.effective_batch == EffectiveBatchOutcome::kBatchChanged) {
    RunConfig c = s.current;
    c.train.batch_size = ref.train.batch_size;
    c.train.lr = ref.train.lr;
    c.train.accumulate = ref.train.accumulate;
    c.train.warmup_steps = ref.train.warmup_steps;
    out.push_back(c);
  }
  if (s.current.train.precision != ref.train.precision) {
    RunConfig c = out.back();
    c.train.precision = ref.train.precision;
    out.push_back(c);
  }
  return out;
}

// Batch `batch`'s measured samples/s over the user's batch's on goodput's curve (0: either
// was not measured).
double throughput_ratio(const GoodputChoice& g, int64_t batch) {
  double x0 = 0, x = 0;
  for (const GoodputPoint& p : g.curve) {
    if (p.batch == g.b0) x0 = p.samples_per_s;
    if (p.batch == batch) x = p.samples_per_s;
  }
  return x0 > 0 ? x / x0 : 0;
}

// A batch taken by goodput claims to reach a quality sooner in time, not in fewer samples: it
// is judged against the reference at equal wall time, with the samples its measured throughput
// buys in the reference's time (at most 8×). Any other candidate: `samples`.
int64_t equal_time_samples(const GoodputChoice& g, const RunConfig& c, int64_t samples) {
  if (!g.usable || c.train.batch_size <= g.b0 || c.train.accumulate != 1) return samples;
  const double ratio = throughput_ratio(g, c.train.batch_size);
  if (ratio <= 1) return samples;
  return static_cast<int64_t>(std::llround(static_cast<double>(samples) * std::min(ratio, 8.0)));
}

// The candidate is the batch goodput took (the batch stage's change, not a later stage's).
bool is_goodput_candidate(const TuneState& s, const RunConfig& c) {
  const GoodputChoice& g = s.plan.goodput;
  return g.usable && g.chosen > g.b0 && c.train.batch_size == g.chosen &&
         s.plan.effective_batch == EffectiveBatchOutcome::kLrRescaled;
}

// The guard's other runs can search this many more batches below goodput's first choice: the
// measured batches between the user's and it that were predicted to pay.
int extra_goodput_branches(const GoodputChoice& g) {
  int n = 0;
  for (const GoodputPoint& p : g.curve)
    if (p.batch > g.b0 && p.batch < g.chosen && p.speedup >= 1 + kGoodputMinGain) ++n;
  return std::min(n, kGoodputMaxBranches - 1);
}

// The runs' cost from what was measured; a configuration not measured yet is assumed as slow
// as the slowest one that was.
GuardCost cost_of(const TuneState& s, const RunConfig& ref, const std::vector<RunConfig>& cands) {
  GuardCost cost;
  cost.fixed_s_per_run = s.runner.run_overhead_s();
  cost.slowest_samples_per_s =
      std::max(1e-9, std::min(TuneState::sps(s.current_out),
                              std::max(s.known_sps(ref), s.plan.baseline.samples_per_s)));
  auto seconds_per_sample_of = [&](const RunConfig& c) {
    const double v = s.known_sps(c);
    return 1.0 / (v > 0 ? v : cost.slowest_samples_per_s);
  };
  cost.seconds_per_sample = 2.0 * seconds_per_sample_of(ref);  // the baseline's two seeds
  cost.largest_batch = ref.train.batch_size;
  int extra = 0;
  for (const RunConfig& c : cands) {
    // Goodput's batch runs as long as the reference (equal time), and so may each batch the
    // search tries below it.
    if (is_goodput_candidate(s, c)) {
      extra = extra_goodput_branches(s.plan.goodput);
      cost.seconds_per_sample += (1 + extra) * seconds_per_sample_of(ref);
    } else {
      cost.seconds_per_sample += seconds_per_sample_of(c);
    }
    cost.largest_batch = std::max(cost.largest_batch, c.train.batch_size);
  }
  cost.runs = static_cast<int>(2 + cands.size()) + extra;
  return cost;
}

std::string unaffordable_why(const TuneState& s, const GuardSizing& z, const GuardCost& cost,
                             const RunConfig& ref) {
  const double left = s.left_s();
  return "not run: " + format_fixed(std::max(0.0, left), 0) + " s of the --budget-s " +
         format_fixed(s.o.budget_s, 0) + " s is left, enough for " +
         std::to_string(std::max<int64_t>(0, z.samples)) + " training samples per run (" +
         std::to_string(cost.runs) + " runs); a meaningful guard needs " +
         std::to_string(z.needed) + " (" + std::to_string(s.o.min_quality_steps) +
         " steps of batch " + std::to_string(cost.largest_batch) +
         "); kept only changes that leave the optimisation as it was: " + ref.describe();
}

// A value of the guard's metric as the report shows it: a share in percent, else as it is.
std::string shown(double value, bool share) {
  return share ? format_fixed(100 * value, 2) + "%" : format_fixed(value, 4);
}
// A difference of the metric: points of a share, else its own units.
std::string shown_diff(double value, bool share) {
  return share ? format_fixed(100 * value, 2) + " points" : format_fixed(value, 4);
}

std::string inconclusive_why(const TuneState& s, int64_t samples, const RunConfig& ref) {
  const QualityCheck& q = s.plan.quality;
  return std::to_string(samples) +
         " training samples per run (what the budget affords): seed-to-seed noise: the "
         "baseline's two seeds differ by " +
         shown_diff(q.metric_noise, s.metric_is_share) + " of " + q.metric + ", more than " +
         shown_diff(s.o.max_tolerance_factor / 2 * s.o.quality_tolerance, s.metric_is_share) +
         ", so these runs cannot judge a change; kept only changes that leave the "
         "optimisation as it was: " + ref.describe() +
         " (a larger --budget-s or --quality-samples buys longer runs)";
}

// One candidate's guard run, judged against the baseline; the verdict's text goes to `why`.
struct Judged {
  QualityRun run;
  GuardVerdict verdict;
  int64_t samples = 0;
};

Judged judge_one(TuneState& s, const RunConfig& c, const QualityRun& b, const GuardTolerances& tol,
                 int64_t samples, std::ostringstream& why) {
  s.check_stop();
  Judged j;
  j.samples = equal_time_samples(s.plan.goodput, c, samples);
  j.run = s.runner.train_and_validate(c, j.samples);
  const QualityRun& t = j.run;
  why << "; " << c.describe();
  if (c.train.lr > 0) why << ", lr " << format_fixed(c.train.lr, 6);  // 0: the program's own
  if (j.samples != samples) why << " (by goodput, at equal time: " << j.samples << " samples)";
  why << ": ";
  j.verdict = judge_candidate(b, t, tol, s.target_bytes());
  if (!j.verdict.fits) {
    why << "rejected (" << j.verdict.reasons() << ")";
    return j;
  }
  why << s.plan.quality.metric << " " << shown(t.validation_metric, t.metric_is_share) << " vs "
      << shown(b.validation_metric, b.metric_is_share) << ", loss "
      << format_fixed(t.final_loss, 4) << " vs " << format_fixed(b.final_loss, 4);
  why << (j.verdict.accepted() ? ": accepted" : ": rejected (" + j.verdict.reasons() + ")");
  return j;
}

void accept(TuneState& s, const RunConfig& c, const QualityRun& t) {
  QualityCheck& q = s.plan.quality;
  q.accepted = true;
  q.status = QualityStatus::kAccepted;
  q.tuned = t.validation_metric;
  q.tuned_loss = t.final_loss;
  q.tuned_losses = t.losses;
  s.plan.tuned.validation_metric = t.validation_metric;
  s.plan.tuned.final_loss = t.final_loss;
  s.adopt(c, s.measured(c, "quality_guard"));
}

// What a goodput branch measured, in the guard's words, with the φ the search goes on with:
// lower for a rejected batch that learned less than predicted, higher for an accepted one that
// learned more.
GoodputBranch measure_branch(const GoodputChoice& g, const RunConfig& c, const Judged& j,
                             const QualityRun& b, const QualityRun& b2, std::ostringstream& why) {
  GoodputBranch br;
  br.batch = c.train.batch_size;
  br.lr = c.train.lr;
  br.samples = j.samples;
  br.accepted = j.verdict.accepted();
  const auto b0 = static_cast<double>(g.b0), batch = static_cast<double>(br.batch);
  br.predicted_efficiency = batch_efficiency(g.phi_used, b0, batch);
  const MeasuredEfficiency m = measure_efficiency({b.losses, b2.losses}, g.b0, j.run.losses,
                                                  br.batch);
  br.measured_efficiency = m.efficiency;
  br.diverged = m.diverged || !j.verdict.fits;
  br.phi_after = g.phi_used;
  why << " (efficiency predicted " << format_fixed(br.predicted_efficiency, 2) << ", measured ";
  if (br.diverged) {
    why << "none: it diverged or made no progress, a learning rate the batch cannot take)";
    return br;
  }
  if (!std::isfinite(m.efficiency)) {
    why << "unknown: no loss curve)";
    return br;
  }
  why << format_fixed(m.efficiency, 2);
  const double measured_phi = phi_from_efficiency(m.efficiency, b0, batch);
  if (!br.accepted) {
    br.phi_after = std::min(g.phi_used, measured_phi);
  } else if (measured_phi > g.phi_used) {
    // One run's efficiency near 1 makes a φ of thousands: credit at most the probe's upper end
    // or four times what was credited, whichever is more. The larger batch it picks is trained
    // and measured before it is taken, so crediting more costs a guard run, never quality.
    const double high = std::isfinite(g.noise.high) ? g.noise.high : 0;
    br.phi_after = std::min(measured_phi, std::max(high, kGoodputMaxCredit * g.phi_used));
  }
  if (br.phi_after != g.phi_used) why << ", so φ is credited " << format_fixed(br.phi_after, 0);
  why << ")";
  return br;
}

// A branch's measured speed-up to the reference's quality: its measured efficiency times its
// samples/s over the user's batch's.
double measured_speedup(const GoodputChoice& g, const GoodputBranch& br) {
  const double v = br.measured_efficiency * throughput_ratio(g, br.batch);
  return std::isfinite(v) ? v : 0;
}

// A batch that passed on quality at equal time can still be slower to it than the user's batch
// at the same settings: equal-time quality saturates near the end of a run, and the reference
// there is the user's configuration, which the plan's precision and layout may have made
// slower. When its measured efficiency times its samples/s over the user's batch's is below 1,
// it is not taken: the branch is marked slower, and φ is corrected down by what it measured.
bool slower_than_user_batch(const GoodputChoice& g, GoodputBranch& br, std::ostringstream& why) {
  const double ratio = throughput_ratio(g, br.batch);
  if (!br.accepted || !std::isfinite(br.measured_efficiency) || !(ratio > 0)) return false;
  const double v = measured_speedup(g, br);
  if (v >= 1.0) return false;
  br.accepted = false;
  br.slower = true;
  const auto b0 = static_cast<double>(g.b0), batch = static_cast<double>(br.batch);
  br.phi_after = std::min(g.phi_used, phi_from_efficiency(br.measured_efficiency, b0, batch));
  why << "; but at that efficiency and " << format_fixed(ratio, 2)
      << "× the samples/s of batch " << g.b0 << " it reaches the quality "
      << format_fixed(v, 2) << "× as fast as batch " << g.b0
      << " at these settings: not taken, φ corrected to " << format_fixed(br.phi_after, 0);
  return true;
}

// After batch c was accepted with more efficiency than predicted: the larger batch the
// corrected φ predicts faster is trained at equal time too, and replaces c (and its run j)
// when it also passes and its measured speed-up is at least c's. Needs the reference's run
// time left over a tenth of the budget.
void search_up(TuneState& s, const RunConfig& first, const QualityRun& b, const QualityRun& b2,
               const GuardTolerances& tol, int64_t samples, std::ostringstream& why, RunConfig& c,
               Judged& j) {
  GoodputChoice& g = s.plan.goodput;
  const GoodputBranch at = g.branches.back();
  if (!(at.phi_after > g.phi_used)) return;
  const double reserve = std::isfinite(s.o.budget_s) && s.o.budget_s > 0 ? 0.1 * s.o.budget_s : 0;
  if (s.left_s() < 1.25 * b.wall_s + reserve) return;
  GoodputChoice up = choose_above(g, c.train.batch_size, at.phi_after, s.base.train.optimizer,
                                  kGoodputSearchUpGain);
  if (up.chosen <= c.train.batch_size) {
    why << "; at that φ no larger measured batch is predicted faster than batch "
        << c.train.batch_size;
    return;
  }
  const GoodputChoice before = g;
  g = up;
  const RunConfig u = goodput_batch(first, s.base, g).config;
  why << "; up the curve";
  const Judged ju = judge_one(s, u, b, tol, samples, why);
  GoodputBranch br = measure_branch(g, u, ju, b, b2, why);
  br.searched_up = true;
  g.branches.push_back(br);
  const double mine = measured_speedup(g, br), theirs = measured_speedup(g, at);
  if (ju.verdict.accepted() && mine >= theirs) {
    why << ": taken, measured " << format_fixed(mine, 2) << "× vs " << format_fixed(theirs, 2)
        << "× the user's batch to its quality";
    c = u;
    j = ju;
    return;
  }
  const std::vector<GoodputBranch> branches = g.branches;
  g = before;
  g.branches = branches;
  why << "; kept batch " << c.train.batch_size << " (measured " << format_fixed(theirs, 2)
      << "× the user's batch to its quality, batch " << u.train.batch_size << " "
      << format_fixed(mine, 2) << "×" << (ju.verdict.accepted() ? "" : ", rejected") << ")";
}

// The guard's search along the goodput curve: goodput's batch first, at equal time; a rejected
// batch moves the search to the best smaller batch on the curve, at the φ its run measured
// (unchanged when it diverged: the learning rate failed, not the noise estimate); an accepted
// one that learned more than predicted is tried against the next larger batch (search_up).
// Returns whether a batch was accepted.
bool search_goodput(TuneState& s, const QualityRun& b, const QualityRun& b2,
                    const GuardTolerances& tol, int64_t samples, std::ostringstream& why) {
  GoodputChoice& g = s.plan.goodput;
  const RunConfig first = s.current;
  RunConfig c = first;
  for (int i = 0; i < kGoodputMaxBranches && s.left_s() > 0; ++i) {
    Judged j = judge_one(s, c, b, tol, samples, why);
    g.branches.push_back(measure_branch(g, c, j, b, b2, why));
    slower_than_user_batch(g, g.branches.back(), why);
    if (g.branches.back().accepted) {
      if (i + 1 < kGoodputMaxBranches) search_up(s, first, b, b2, tol, samples, why, c, j);
      if (c.train.batch_size != first.train.batch_size) {
        const GoodputBranch& f = g.branches.front();
        s.set_effective_batch(
            EffectiveBatchOutcome::kLrRescaled,
            concat("batch ", g.b0, " → ", g.chosen, " by goodput after the quality guard ",
                   f.accepted ? "measured more efficiency than predicted at batch "
                              : "rejected batch ",
                   f.batch, ": ", g.why));
      }
      accept(s, c, j.run);
      return true;
    }
    g = choose_below(g, c.train.batch_size, g.branches.back().phi_after, s.base.train.optimizer);
    if (!g.usable || g.chosen <= g.b0) break;
    c = goodput_batch(first, s.base, g).config;
  }
  if (g.chosen > g.b0)
    g.why = concat("the search stopped after ", g.branches.size(), " batches (",
                   s.left_s() > 0 ? "its limit" : "the budget", ")");
  why << "; no batch on the goodput curve passed and paid: " << g.why;
  g.keep_user_batch();
  return false;
}

// Trains each candidate in order; the first that passes is adopted. Returns the verdicts' text.
std::string judge_candidates(TuneState& s, const std::vector<RunConfig>& candidates,
                             const QualityRun& b, const QualityRun& b2,
                             const GuardTolerances& tol, int64_t samples) {
  std::ostringstream why;
  size_t i = 0;
  if (is_goodput_candidate(s, candidates[0])) {
    if (search_goodput(s, b, b2, tol, samples, why)) return why.str();
    i = 1;
  }
  for (; i < candidates.size(); ++i) {
    const RunConfig& c = candidates[i];
    const Judged j = judge_one(s, c, b, tol, samples, why);
    if (!j.verdict.accepted()) continue;
    if (i > 0)
      s.set_effective_batch(c.train.accumulate > 1 ? EffectiveBatchOutcome::kKept
                                                   : EffectiveBatchOutcome::kUnchanged,
                            "the quality guard rejected the rescaled batch");
    accept(s, c, j.run);
    break;
  }
  return why.str();
}

// Nothing to judge: the guard was not asked for, or the batch, precision and LR are the user's.
bool nothing_to_check(TuneState& s) {
  QualityCheck& q = s.plan.quality;
  const TrainOptions &now = s.current.train, &user = s.base.train;
  if (s.o.quality_samples <= 0) {
    q.why = "not run (no quality samples asked for)";
  } else if (now.batch_size == user.batch_size && now.precision == user.precision &&
             now.lr == user.lr) {
    q.accepted = true;
    q.why = "nothing to check: batch, precision and learning rate are the user's";
  } else {
    return false;
  }
  q.status = QualityStatus::kNotRun;
  const double after = TuneState::sps(s.current_out);
  s.finish_stage("quality_guard", after, after, false, q.why);
  return true;
}

}  // namespace

void quality_guard(TuneState& s) {
  QualityCheck& q = s.plan.quality;
  q.tolerance = s.o.quality_tolerance;
  if (nothing_to_check(s)) return;
  const double after = TuneState::sps(s.current_out);
  const RunConfig ref = s.safe_reference();
  const std::vector<RunConfig> candidates = candidates_for(s, ref);
  const GuardCost cost = cost_of(s, ref, candidates);
  const GuardSizing z = size_guard(cost, s.o, s.left_s());
  if (!z.affordable())
    return give_up(s, ref, QualityStatus::kUnaffordable, unaffordable_why(s, z, cost, ref),
                   "the quality guard could not run in the budget, so the batch, precision and "
                   "learning rate stay yours");
  q.samples = z.samples;
  s.check_stop();
  const QualityRun b = s.runner.train_and_validate(ref, z.samples);
  s.check_stop();
  RunConfig ref2 = ref;
  ref2.train.seed = ref.train.seed + 1;
  const QualityRun b2 = s.runner.train_and_validate(ref2, z.samples);
  if (!b.fits || !b2.fits)
    return give_up(s, ref, QualityStatus::kRejected,
                   "the baseline ran out of memory in its quality run; kept " + ref.describe(),
                   "the quality guard could not run the baseline");
  const GuardTolerances tol = guard_tolerances(b, b2, s.o);
  q.metric = b.metric;
  s.metric_is_share = b.metric_is_share;
  q.baseline = b.validation_metric;
  q.baseline_loss = b.final_loss;
  q.baseline_losses = b.losses;
  q.metric_noise = tol.metric_noise;
  q.loss_noise = tol.loss_noise;
  q.tolerance = tol.metric;
  s.plan.baseline.validation_metric = b.validation_metric;
  s.plan.baseline.final_loss = b.final_loss;
  // Runs so short that two seeds of the same configuration disagree by several tolerances
  // cannot tell a harmful change from a harmless one: say so rather than accept anything.
  if (!tol.conclusive)
    return give_up(s, ref, QualityStatus::kInconclusive, inconclusive_why(s, z.samples, ref),
                   "the quality guard's runs were too short to judge the batch change");
  std::ostringstream why;
  why << z.samples << " training samples per run; seed-to-seed noise " << q.metric << " "
      << shown_diff(q.metric_noise, b.metric_is_share) << ", loss " << pct(q.loss_noise)
      << ": rejects a drop of " << q.metric << " above "
      << shown_diff(tol.metric, b.metric_is_share) << " or a loss rise above " << pct(tol.loss)
      << judge_candidates(s, candidates, b, b2, tol, z.samples);
  if (!q.accepted) {
    q.tuned = b.validation_metric;
    q.tuned_loss = b.final_loss;
    q.tuned_losses = b.losses;
    why << "; fell back to " << ref.describe();
    give_up(s, ref, QualityStatus::kRejected, why.str(),
            "every tuned candidate failed the quality guard");
    return;
  }
  q.why = why.str();
  s.finish_stage("quality_guard", after, TuneState::sps(s.current_out),
                 s.current.describe() != candidates[0].describe() ||
                     s.current.train.lr != candidates[0].train.lr,
                 q.why);
}

}  // namespace saturate::tune_detail
