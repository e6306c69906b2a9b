// SPDX-License-Identifier: Apache-2.0
#include "tune_state.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/telemetry/throughput.h"
#include "saturate/tune/noise_rule.h"

namespace saturate::tune_detail {

using Clock = std::chrono::steady_clock;

std::string pct(double fraction) { return format_fixed(100.0 * fraction, 1) + "%"; }

std::string breakdown(const Measurement& m) {
  const PhaseBreakdown& p = m.phases;
  if (p.step_ms <= 0) return "";
  auto share = [&](double ms) { return pct(ms / p.step_ms); };
  // A program measured only by its step lines (--exec): data wait and the rest.
  if (p.forward_ms + p.backward_ms + p.optimizer_ms + p.host_to_device_ms <= 0)
    return "; step " + format_fixed(p.step_ms, 1) + " ms: data " + share(p.data_wait_ms) +
           ", the rest " + share(p.other_ms);
  return "; step " + format_fixed(p.step_ms, 1) + " ms: data " + share(p.data_wait_ms) +
         ", forward " + share(p.forward_ms) + ", backward " + share(p.backward_ms) +
         ", optimizer " + share(p.optimizer_ms);
}

TuneState::TuneState(TrialRunner& r, const RunConfig& b, const TuneOptions& options,
                     const std::function<void(const PlanStage&)>& on_stage)
    : runner(r), base(b), o(options), on_stage_(on_stage), start_(Clock::now()) {
  SATURATE_CHECK(o.measure_steps >= 2, "tune: measurements need at least 2 steps");
  plan.config = base;
  plan.memory_limit_bytes = runner.memory_limit_bytes();
  plan.reserve = o.search.reserve;
}

double TuneState::elapsed_s() const {
  if (o.elapsed_s) return o.elapsed_s();
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

double TuneState::left_s() const {
  return o.budget_s > 0 ? o.budget_s - elapsed_s() : std::numeric_limits<double>::infinity();
}

bool TuneState::search_time_spent() const {
  return o.budget_s > 0 && elapsed_s() > o.search_share * o.budget_s;
}

void TuneState::check_stop() const {
  if (o.stop && o.stop->load()) throw Interrupted{};
}

int64_t TuneState::target_bytes() const {
  return static_cast<int64_t>(static_cast<double>(runner.memory_limit_bytes()) *
                              (1.0 - o.search.reserve));
}

bool TuneState::safe(const TrialOutcome& t) const {
  return t.fits && t.measurement.peak_memory_bytes <= target_bytes();
}

const TrialOutcome& TuneState::measured(const RunConfig& c, const std::string& stage) {
  const std::string key = c.describe();
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const TrialOutcome t = fresh(c, stage);
  return cache_.emplace(key, t).first->second;
}

TrialOutcome TuneState::fresh(const RunConfig& c, const std::string& stage) {
  check_stop();
  TrialRequest req;
  req.config = c;
  req.steps = o.measure_steps;
  req.warmup_steps = 1;
  TrialOutcome t = runner.run(req);
  record(stage, "measure", c, t);
  // Too short to time: measured again, long enough (the first run told how long a step is).
  const int64_t longer =
      t.fits ? steps_for_timed(o.min_timed_s, sps(t), c.global_batch(), req.steps - req.warmup_steps)
             : 0;
  if (longer > req.steps) {
    check_stop();
    req.steps = longer;
    t = runner.run(req);
    record(stage, "measure longer", c, t);
  }
  return t;
}

double TuneState::known_sps(const RunConfig& c) const { return sps(cached(c)); }

TrialOutcome TuneState::cached(const RunConfig& c) const {
  auto it = cache_.find(c.describe());
  if (it != cache_.end()) return it->second;
  TrialOutcome unmeasured;
  unmeasured.fits = true;
  return unmeasured;
}

const TrialOutcome& TuneState::remember(const RunConfig& c, const TrialOutcome& t) {
  return cache_.emplace(c.describe(), t).first->second;  // an earlier measurement stands
}

void TuneState::store(const RunConfig& c, const TrialOutcome& t) {
  cache_[c.describe()] = t;
  if (c.describe() == current.describe()) current_out = t;
}

TrialOutcome TuneState::mean_of(const TrialOutcome& a, const TrialOutcome& b) {
  if (!a.fits) return a;
  if (!b.fits) return b;
  TrialOutcome m = b;
  m.measurement.samples_per_s = 0.5 * (sps(a) + sps(b));
  m.measurement.peak_memory_bytes =
      std::max(a.measurement.peak_memory_bytes, b.measurement.peak_memory_bytes);
  std::vector<double>& steps = m.measurement.step_samples_per_s;
  steps.insert(steps.begin(), a.measurement.step_samples_per_s.begin(),
               a.measurement.step_samples_per_s.end());
  m.steps_run = a.steps_run + b.steps_run;
  return m;
}

bool TuneState::better(const TrialOutcome& a, const TrialOutcome& b) const {
  if (!safe(a)) return false;
  if (!b.fits) return true;
  return beats(sps(a), relative_standard_error(a.measurement.step_samples_per_s), sps(b),
               relative_standard_error(b.measurement.step_samples_per_s), o.min_gain);
}

Pick TuneState::pick_fastest(const std::string& stage, const std::vector<Candidate>& candidates,
                             OnTrialError on_error) {
  return pick_fastest(stage, current, current_out, candidates, on_error);
}

Pick TuneState::pick_fastest(const std::string& stage, const RunConfig& from,
                             const TrialOutcome& from_out,
                             const std::vector<Candidate>& candidates, OnTrialError on_error) {
  Pick best{from, from_out, ""};
  std::string best_label;
  std::ostringstream tried;
  for (const Candidate& c : candidates) {
    tried << (tried.tellp() > 0 ? ", " : "") << c.label << " ";
    const TrialOutcome* out = nullptr;
    try {
      out = &measured(c.config, stage);
    } catch (const Error& e) {
      if (on_error == OnTrialError::kRethrow) throw;
      tried << "cannot run (" << first_line(e.what()) << ")";
      if (on_error == OnTrialError::kStop) break;
      continue;
    }
    tried << (out->fits ? format_fixed(sps(*out), 1) + " samples/s" : std::string("out of memory"));
    if (better(*out, best.outcome)) {
      best.config = c.config;
      best.outcome = *out;
      best_label = c.label;
    }
  }
  if (!best_label.empty() && safe(from_out))
    replicate(stage, from, from_out, best_label, best, tried);
  best.tried = tried.str();
  return best;
}

// The winner measured again, then the incumbent: kept only if it wins this reverse-order
// round too; each configuration's measurement becomes the mean of its two readings.
void TuneState::replicate(const std::string& stage, const RunConfig& from,
                          const TrialOutcome& from_out, const std::string& label, Pick& best,
                          std::ostringstream& tried) {
  const TrialOutcome again = fresh(best.config, stage);
  const TrialOutcome from_again = fresh(from, stage);
  const TrialOutcome from_mean = mean_of(from_out, from_again);
  store(from, from_mean);
  tried << "; measured again, " << label << " first: "
        << (again.fits ? format_fixed(sps(again), 1) + " samples/s" : std::string("out of memory"))
        << " vs " << format_fixed(sps(from_again), 1);
  if (better(again, from_again)) {
    best.outcome = mean_of(best.outcome, again);
    store(best.config, best.outcome);
    tried << ": " << label << " won again";
    return;
  }
  tried << ": " << label << " did not win again";
  best.config = from;
  best.outcome = from_mean;
}

void TuneState::adopt(const RunConfig& c, const TrialOutcome& t) {
  current = c;
  current_out = t;
  if (safe(t)) {
    last_safe_ = c;
    last_safe_out_ = t;
    has_safe_ = true;
  }
}

void TuneState::set_eval_batch(int64_t eval_batch) {
  current.train.eval_batch_size = eval_batch;
  if (has_safe_) last_safe_.train.eval_batch_size = eval_batch;
}

void TuneState::record(const std::string& stage, const std::string& purpose, const RunConfig& c,
                       const TrialOutcome& t) {
  PlanTrial p;
  p.stage = stage;
  p.purpose = purpose;
  p.config = c;
  p.fits = t.fits;
  p.samples_per_s = t.measurement.samples_per_s;
  p.spread = t.measurement.spread;
  p.peak_memory_bytes = t.measurement.peak_memory_bytes;
  p.steps = t.steps_run;
  plan.trials.push_back(p);
}

void TuneState::finish_stage(const std::string& name, double before, double after, bool changed,
                             const std::string& why) {
  PlanStage s{name, before, after, changed, why};
  plan.stages.push_back(s);
  if (on_stage_) on_stage_(s);
}

bool TuneState::skip_over_budget(const std::string& stage) {
  if (!search_time_spent()) return false;
  finish_stage(stage, sps(current_out), sps(current_out), false,
               "skipped: " + format_fixed(100 * o.search_share, 0) + "% of the --budget-s " +
                   format_fixed(o.budget_s, 0) + " s is spent; the rest is the guard's");
  return true;
}

void TuneState::set_effective_batch(EffectiveBatchOutcome outcome, const std::string& why) {
  plan.effective_batch = outcome;
  plan.effective_batch_why = why;
}

void TuneState::set_measured(PlanResult& r, const TrialOutcome& t) {
  r.samples_per_s = t.measurement.samples_per_s;
  r.spread = t.measurement.spread;
  r.peak_memory_bytes = t.measurement.peak_memory_bytes;
  r.phases = t.measurement.phases;
}

RunConfig TuneState::reference() const {
  return base_fits ? base : split_to_fit(base, search.largest_safe);
}

RunConfig TuneState::safe_reference() const {
  RunConfig ref = reference();
  ref.workers = current.workers;
  ref.prefetch = current.prefetch;
  ref.threads = current.threads;
  ref.train.memory_format = current.train.memory_format;
  // The evaluation batch measured with the training state resident (eval_batch stage):
  // evaluation's numbers in the plan are for it.
  ref.train.eval_batch_size = current.train.eval_batch_size;
  return ref;
}

Plan TuneState::finish() {
  // Whatever a stage or the guard settled on must have measured under the limit less the
  // reserve; otherwise the last configuration that did stands.
  if (!safe(current_out) && has_safe_) {
    finish_stage("memory_check", sps(current_out), sps(last_safe_out_), true,
                 current.describe() + " peaked at " +
                     format_bytes(current_out.measurement.peak_memory_bytes) + ", above " +
                     format_bytes(target_bytes()) + ": back to " + last_safe_.describe());
    current = last_safe_;
    current_out = last_safe_out_;
  }
  plan.config = current;
  set_measured(plan.tuned, current_out);
  plan.tune_wall_s = elapsed_s();
  plan.budget_s = o.budget_s;
  for (const PlanTrial& t : plan.trials) plan.probe_steps += t.steps;
  return std::move(plan);
}

}  // namespace saturate::tune_detail
