// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/telemetry/throughput.h"
#include "saturate/tune/noise_rule.h"

namespace saturate {

EffectiveBatch parse_effective_batch(const std::string& text) {
  if (text == "auto") return EffectiveBatch::kAuto;
  if (text == "keep") return EffectiveBatch::kKeep;
  if (text == "rescale") return EffectiveBatch::kRescale;
  SATURATE_CHECK(false, "tune: --effective-batch must be auto, keep or rescale, got '", text, "'");
  return EffectiveBatch::kAuto;
}

std::string to_string(EffectiveBatch e) {
  switch (e) {
    case EffectiveBatch::kAuto: return "auto";
    case EffectiveBatch::kKeep: return "keep";
    case EffectiveBatch::kRescale: return "rescale";
  }
  return "auto";
}

double rescaled_lr(double lr, OptimizerKind optimizer, int64_t from, int64_t to) {
  SATURATE_CHECK(from > 0 && to > 0, "tune: batch sizes must be positive to rescale the LR");
  const double k = static_cast<double>(to) / static_cast<double>(from);
  return optimizer == OptimizerKind::kSgd ? lr * k : lr * std::sqrt(k);
}

namespace {

using Clock = std::chrono::steady_clock;

std::string pct(double fraction) { return format_fixed(100.0 * fraction, 1) + "%"; }

// Relative standard error of a measurement's mean, from its timed steps.
double noise_of(const Measurement& m) { return relative_standard_error(m.step_samples_per_s); }

// Thrown at a trial boundary once the stop flag is set; tune() returns the plan so far.
struct Interrupted {};

class Tuner {
 public:
  Tuner(TrialRunner& runner, const RunConfig& base, const TuneOptions& o,
        const std::function<void(const PlanStage&)>& on_stage)
      : runner_(runner), base_(base), o_(o), on_stage_(on_stage), start_(Clock::now()) {
    SATURATE_CHECK(o.measure_steps >= 2, "tune: measurements need at least 2 steps");
    plan_.config = base;
    plan_.memory_limit_bytes = runner.memory_limit_bytes();
    plan_.reserve = o.search.reserve;
  }

  Plan run() {
    try {
      check();
      baseline();
      if (!over_budget("precision")) precision();
      if (!o_.memory_formats.empty() && !over_budget("memory_format")) memory_format();
      if (!over_budget("batch_size")) batch_size();
      if (!over_budget("memory_savers")) memory_savers();
      if (o_.max_workers > 0 && !over_budget("input_pipeline")) input_pipeline();
      if (!o_.threads.empty() && !over_budget("threads")) threads();
      if (!over_budget("eval_batch")) eval_batch();
      quality_guard();
      confirm();
    } catch (const Interrupted&) {
      plan_.interrupted = true;
      plan_.quality.status = "not_run";
      plan_.quality.why = "not run: interrupted";
      finish_stage("interrupted", sps(current_out_), sps(current_out_), false,
                   "stopped at a trial boundary (Ctrl-C); the plan holds the stages so far");
    }
    // Whatever a stage or the guard settled on must have measured under the limit less the
    // reserve; otherwise the last configuration that did stands.
    if (!safe(current_out_) && has_safe_) {
      finish_stage("memory_check", sps(current_out_), sps(last_safe_out_), true,
                   current_.describe() + " peaked at " +
                       format_bytes(current_out_.measurement.peak_memory_bytes) + ", above " +
                       format_bytes(target_bytes()) + ": back to " + last_safe_.describe());
      current_ = last_safe_;
      current_out_ = last_safe_out_;
    }
    plan_.config = current_;
    set_measured(plan_.tuned, current_out_);
    plan_.tune_wall_s = elapsed_s();
    plan_.budget_s = o_.budget_s;
    for (const PlanTrial& t : plan_.trials) plan_.probe_steps += t.steps;
    return std::move(plan_);
  }

 private:
  double elapsed_s() const {
    if (o_.elapsed_s) return o_.elapsed_s();
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }
  double left_s() const {
    return o_.budget_s > 0 ? o_.budget_s - elapsed_s() : std::numeric_limits<double>::infinity();
  }
  bool search_time_spent() const {
    return o_.budget_s > 0 && elapsed_s() > o_.search_share * o_.budget_s;
  }
  void check_stop() const {
    if (o_.stop && o_.stop->load()) throw Interrupted{};
  }
  int64_t target_bytes() const {
    return static_cast<int64_t>(static_cast<double>(runner_.memory_limit_bytes()) *
                                (1.0 - o_.search.reserve));
  }
  bool safe(const TrialOutcome& t) const {
    return t.fits && t.measurement.peak_memory_bytes <= target_bytes();
  }
  // The configuration of every stage passes through here: the last one that measured safe is
  // kept for the final memory check.
  void adopt(const RunConfig& c, const TrialOutcome& t) {
    current_ = c;
    current_out_ = t;
    if (safe(t)) {
      last_safe_ = c;
      last_safe_out_ = t;
      has_safe_ = true;
    }
  }

  bool over_budget(const char* stage) {
    if (!search_time_spent()) return false;
    finish_stage(stage, sps(current_out_), sps(current_out_), false,
                 "skipped: " + format_fixed(100 * o_.search_share, 0) + "% of the --budget-s " +
                     format_fixed(o_.budget_s, 0) + " s is spent; the rest is the guard's");
    return true;
  }

  static double sps(const TrialOutcome& t) { return t.fits ? t.measurement.samples_per_s : 0.0; }

  void record(const std::string& stage, const std::string& purpose, const RunConfig& c,
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
    plan_.trials.push_back(p);
  }

  // Measures `c` once per stage run; later stages reuse the measurement of the same settings.
  const TrialOutcome& measured(const RunConfig& c, const std::string& stage) {
    const std::string key = c.describe();
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    check_stop();
    TrialRequest req;
    req.config = c;
    req.steps = o_.measure_steps;
    req.warmup_steps = 1;
    const TrialOutcome t = runner_.run(req);
    record(stage, "measure", c, t);
    return cache_.emplace(key, t).first->second;
  }

  // Faster by at least min_gain and by more than twice the combined noise.
  static void set_measured(PlanResult& r, const TrialOutcome& t) {
    r.samples_per_s = t.measurement.samples_per_s;
    r.spread = t.measurement.spread;
    r.peak_memory_bytes = t.measurement.peak_memory_bytes;
    r.phases = t.measurement.phases;
  }

  bool better(const TrialOutcome& a, const TrialOutcome& b) const {
    if (!safe(a)) return false;
    if (!b.fits) return true;
    return beats(sps(a), noise_of(a.measurement), sps(b), noise_of(b.measurement), o_.min_gain);
  }

  void finish_stage(const std::string& name, double before, double after, bool changed,
                    const std::string& why) {
    PlanStage s{name, before, after, changed, why};
    plan_.stages.push_back(s);
    if (on_stage_) on_stage_(s);
  }

  static std::string breakdown(const Measurement& m) {
    const PhaseBreakdown& p = m.phases;
    if (p.step_ms <= 0) return "";
    auto share = [&](double ms) { return pct(ms / p.step_ms); };
    return "; step " + format_fixed(p.step_ms, 1) + " ms: data " + share(p.data_wait_ms) +
           ", forward " + share(p.forward_ms) + ", backward " + share(p.backward_ms) +
           ", optimizer " + share(p.optimizer_ms);
  }

  // Stage 1: one step of one sample must run and fit, or nothing else can.
  void check() {
    TrialRequest req;
    req.config = base_;
    req.config.train.batch_size = 1;
    req.config.train.accumulate = 1;
    req.steps = 1;
    req.warmup_steps = 0;
    check_stop();
    const TrialOutcome t = runner_.run(req);
    record("check", "one sample", req.config, t);
    const auto target = static_cast<int64_t>(static_cast<double>(runner_.memory_limit_bytes()) *
                                             (1.0 - o_.search.reserve));
    SATURATE_CHECK(t.fits && t.measurement.peak_memory_bytes <= target,
                   "tune: one sample does not fit in ", format_bytes(target), " (",
                   format_bytes(runner_.memory_limit_bytes()), " memory limit less the ",
                   static_cast<int>(o_.search.reserve * 100 + 0.5),
                   "% reserve); raise --memory-limit or pick a smaller model");
  }

  void baseline() {
    adopt(base_, measured(base_, "baseline"));
    base_fits_ = current_out_.fits;
    set_measured(plan_.baseline, current_out_);
    const std::string why =
        base_fits_ ? base_.describe() + ": " + format_fixed(sps(current_out_), 1) +
                         " samples/s, peak " +
                         format_bytes(current_out_.measurement.peak_memory_bytes) +
                         breakdown(current_out_.measurement)
                   : base_.describe() + " runs out of memory under " +
                         format_bytes(runner_.memory_limit_bytes()) + ": memory binds";
    finish_stage("baseline", 0, sps(current_out_), false, why);
  }

  // Precision is compared at the user's batch, or at the largest half of it that fits.
  void precision() {
    if (o_.precisions.empty()) return;
    compare_setting("precision", &TrainOptions::precision, o_.precisions, /*may_not_run=*/false);
  }

  // The layout of image activations: the same math in another order, so only speed (and the
  // peak, which the safety rule checks) decides. Measured at the batch the precision stage used.
  // A model written for one layout (a view() of a conv output, say) cannot run the other: that
  // rules the layout out, not the tune.
  void memory_format() {
    compare_setting("memory_format", &TrainOptions::memory_format, o_.memory_formats,
                    /*may_not_run=*/true);
  }

  // One setting of the step (a precision, a layout) tried at each of `candidates` at the current
  // batch, or at the largest half of it that fits; the fastest beyond noise is taken. With
  // `may_not_run`, a candidate whose trial fails (saturate::Error) is reported and skipped.
  template <typename T>
  void compare_setting(const std::string& stage, T TrainOptions::*setting,
                       const std::vector<T>& candidates, bool may_not_run) {
    RunConfig at = current_;
    TrialOutcome at_out = current_out_;
    while (!at_out.fits && at.train.batch_size > 1) {
      at.train.batch_size /= 2;
      at_out = measured(at, stage);
    }
    if (!at_out.fits) return;  // the batch stage reports what fits
    RunConfig best = at;
    TrialOutcome best_out = at_out;
    std::ostringstream tried;
    for (const T& value : candidates) {
      if (value == at.train.*setting) continue;
      RunConfig c = at;
      c.train.*setting = value;
      tried << (tried.tellp() > 0 ? ", " : "") << to_string(value) << " ";
      const TrialOutcome* out = nullptr;
      try {
        out = &measured(c, stage);
      } catch (const Error& e) {
        if (!may_not_run) throw;
        tried << "cannot run (" << first_line(e.what()) << ")";
        continue;
      }
      tried << (out->fits ? format_fixed(sps(*out), 1) + " samples/s" : std::string("out of memory"));
      if (better(*out, best_out)) {
        best = c;
        best_out = *out;
      }
    }
    const T& kept = current_.train.*setting;
    const T& chosen = best.train.*setting;
    const bool changed = chosen != kept;
    std::string why = to_string(kept) + " " + format_fixed(sps(at_out), 1) + " samples/s at batch " +
                      std::to_string(at.train.batch_size) + "; " + tried.str();
    why += changed ? ": " + to_string(chosen) + " is faster by " +
                         pct(sps(best_out) / sps(at_out) - 1.0)
                   : ": kept " + to_string(kept) + " (nothing faster by at least " +
                         pct(o_.min_gain) + " beyond noise)";
    finish_stage(stage, sps(at_out), sps(best_out), changed, why);
    RunConfig next = current_;
    next.train.*setting = chosen;
    if (base_fits_) adopt(next, measured(next, stage));
    else current_ = next;
  }

  void batch_size() {
    const double before = sps(current_out_);
    BatchSearchOptions so = o_.search;
    so.before_trial = [this] { check_stop(); };
    so.out_of_time = [this] { return search_time_spent(); };
    if (o_.budget_s > 0) so.max_step_s = o_.budget_s * o_.search_share / 40.0;
    const BatchSearchResult r = search_batch_size(runner_, current_, so);
    for (const SearchTrial& t : r.trials) record("batch_size", t.purpose, t.config, t.outcome);
    search_ = r;
    const int64_t user = base_.train.batch_size;
    const int64_t found = r.chosen;
    RunConfig next = current_;
    next.train.accumulate = 1;
    std::string why = r.why + " (largest safe " + std::to_string(r.largest_safe) + ", " +
                      std::to_string(r.steps) + " probe steps, " + std::to_string(r.ooms) +
                      " out of memory)";
    const bool grow = found > user, shrink = found < user;
    const bool user_fits = r.largest_safe >= user;
    if (!grow && !shrink) {
      plan_.effective_batch = "unchanged";
      plan_.effective_batch_why = "the searched batch equals yours (" + std::to_string(user) + ")";
    } else if ((grow && o_.effective_batch == EffectiveBatch::kKeep) ||
               (shrink && o_.effective_batch != EffectiveBatch::kRescale)) {
      // Keep the user's samples per step: the batch stays, split into micro-batches that fit.
      const int64_t micro = std::min(found, r.largest_safe);
      const int64_t k = user_fits && grow ? 1 : (user + micro - 1) / micro;
      next.train.batch_size = user;
      next.train.accumulate = std::max<int64_t>(1, k);
      plan_.effective_batch = "kept";
      plan_.effective_batch_why =
          grow ? "batch " + std::to_string(found) +
                     " measured faster, but --effective-batch keep holds your batch of " +
                     std::to_string(user)
               : "your batch of " + std::to_string(user) + " kept as " + std::to_string(k) +
                     " micro-batches of at most " +
                     std::to_string(next.micro_batch()) +
                     (user_fits ? " (faster than one large step)"
                                : " (one step of " + std::to_string(user) + " does not fit)") +
                     "; the learning rate is unchanged";
    } else {
      next.train.batch_size = found;
      next.train.lr = rescaled_lr(base_.train.lr, base_.train.optimizer, user, found);
      if (next.train.warmup_steps == 0) next.train.warmup_steps = -1;  // default warm-up
      plan_.effective_batch = "lr_rescaled";
      plan_.effective_batch_why =
          "batch " + std::to_string(user) + " → " + std::to_string(found) + ": learning rate " +
          format_fixed(base_.train.lr, 6) + " → " + format_fixed(next.train.lr, 6) + " (" +
          (base_.train.optimizer == OptimizerKind::kSgd ? "linear rule for SGD"
                                                        : "square-root rule for AdamW") +
          ") with linear warm-up";
    }
    const TrialOutcome& out =
        next.train.accumulate == 1 && next.train.batch_size == found
            ? remember(next, r)
            : measured(next, "batch_size");
    // A change must pay for itself: what the search found, applied to the user's recipe (a
    // new batch, or the user's batch as micro-batches), has to beat the current configuration
    // beyond noise, or the current one stays.
    if (next.describe() != current_.describe() && safe(current_out_) && !better(out, current_out_)) {
      plan_.effective_batch = "unchanged";
      plan_.effective_batch_why = "batch " + std::to_string(next.train.batch_size) +
                                  (next.train.accumulate > 1
                                       ? " as " + std::to_string(next.train.accumulate) +
                                             " micro-batches"
                                       : std::string()) +
                                  " measured " + format_fixed(sps(out), 1) +
                                  " samples/s, not faster beyond noise than batch " +
                                  std::to_string(user) + " at " + format_fixed(before, 1);
      finish_stage("batch_size", before, before, false,
                   why + "; kept your batch: " + plan_.effective_batch_why);
      return;
    }
    finish_stage("batch_size", before, sps(out), next.describe() != current_.describe(),
                 why + "; effective batch " + plan_.effective_batch + ": " +
                     plan_.effective_batch_why);
    adopt(next, out);
  }

  // The search's own measurement of its chosen batch stands for the configuration.
  const TrialOutcome& remember(const RunConfig& c, const BatchSearchResult& r) {
    TrialOutcome t;
    t.fits = true;
    for (const SearchTrial& s : r.trials)
      if (s.config.train.batch_size == r.chosen && s.outcome.fits &&
          !s.outcome.measurement.step_samples_per_s.empty())
        t = s.outcome;
    t.measurement.samples_per_s = r.samples_per_s;
    return cache_.emplace(c.describe(), t).first->second;
  }

  // When the user's batch does not fit as one step, activation recomputation may beat
  // accumulation: try a few segment counts at the full batch.
  void memory_savers() {
    if (current_.train.accumulate <= 1) {
      finish_stage("memory_savers", sps(current_out_), sps(current_out_), false,
                   "not needed: each step of " + std::to_string(current_.train.batch_size) +
                       " fits in memory at once");
      return;
    }
    const double before = sps(current_out_);
    RunConfig best = current_;
    TrialOutcome best_out = current_out_;
    std::ostringstream tried;
    for (int s = 2; s <= o_.max_recompute_segments; s *= 2) {
      RunConfig c = current_;
      c.train.recompute_segments = s;
      c.train.accumulate = 1;
      try {
        const TrialOutcome& out = measured(c, "memory_savers");
        tried << (tried.tellp() > 0 ? ", " : "") << s << " recompute segments "
              << (out.fits ? format_fixed(sps(out), 1) + " samples/s" : "out of memory");
        if (better(out, best_out)) {
          best = c;
          best_out = out;
        }
      } catch (const Error& e) {
        tried << (tried.tellp() > 0 ? ", " : "") << "recomputation unavailable (" << e.what() << ")";
        break;
      }
    }
    const bool changed = best.describe() != current_.describe();
    finish_stage("memory_savers", before, sps(best_out), changed,
                 "accumulation " + std::to_string(current_.train.accumulate) + "× " +
                     format_fixed(before, 1) + " samples/s; " + tried.str() +
                     (changed ? ": recomputation wins" : ": kept accumulation"));
    adopt(best, best_out);
  }

  // Hill-climbs the input pipeline's workers (1, 2, 4, … up to max_workers, each with as many
  // batches of prefetch) while data wait is a visible share of the step and each step up is
  // faster beyond noise (tf.data's autotune idea on measured steps).
  void input_pipeline() {
    const double before = sps(current_out_);
    auto wait_share = [](const TrialOutcome& t) {
      const Measurement& m = t.measurement;
      return m.phases.step_ms > 0 ? m.phases.data_wait_ms / m.phases.step_ms : 0.0;
    };
    const double share = wait_share(current_out_);
    if (share <= o_.data_wait_target) {
      finish_stage("input_pipeline", before, before, false,
                   "data wait is " + pct(share) + " of the step (target " +
                       pct(o_.data_wait_target) + "): the input pipeline keeps up");
      return;
    }
    RunConfig best = current_;
    TrialOutcome best_out = current_out_;
    std::ostringstream tried;
    for (int w = std::max(1, current_.workers * 2); w <= o_.max_workers; w *= 2) {
      RunConfig c = best;
      c.workers = w;
      c.prefetch = std::max(2, w);
      const TrialOutcome& out = measured(c, "input_pipeline");
      tried << (tried.tellp() > 0 ? ", " : "") << w << " workers " << format_fixed(sps(out), 1)
            << " samples/s (data wait " << pct(wait_share(out)) << ")";
      if (!better(out, best_out)) {
        // One worker only overlaps making a batch with the step; when making it dominates,
        // that gains no more than the step's small share, while two workers double the
        // supply. So one worker that is no slower does not end the climb.
        if (w == 1 && sps(out) >= sps(best_out) * (1.0 - o_.min_gain)) continue;
        break;
      }
      best = c;
      best_out = out;
      if (wait_share(out) <= o_.data_wait_target) break;
    }
    // Then a deeper queue at those workers, while the wait still shows: bursts of slow samples
    // (large files, a busy disk) drain a short queue even when the workers keep up on average.
    for (int depth = best.prefetch * 2;
         best.workers > 0 && wait_share(best_out) > o_.data_wait_target &&
         depth <= o_.max_prefetch;
         depth *= 2) {
      RunConfig c = best;
      c.prefetch = depth;
      const TrialOutcome& out = measured(c, "input_pipeline");
      tried << ", prefetch " << depth << " " << format_fixed(sps(out), 1)
            << " samples/s (data wait " << pct(wait_share(out)) << ")";
      if (!better(out, best_out)) break;
      best = c;
      best_out = out;
    }
    const bool changed = best.workers != current_.workers || best.prefetch != current_.prefetch;
    const std::string setting =
        std::to_string(best.workers) + " workers, prefetch " + std::to_string(best.prefetch);
    finish_stage("input_pipeline", before, sps(best_out), changed,
                 "data wait " + pct(share) + " of the step with " +
                     std::to_string(current_.workers) + " workers; " + tried.str() +
                     (changed ? ": " + setting : ": kept " + std::to_string(current_.workers) +
                                                     " workers"));
    adopt(best, best_out);
  }

  void threads() {
    const double before = sps(current_out_);
    RunConfig best = current_;
    TrialOutcome best_out = current_out_;
    std::ostringstream tried;
    for (int n : o_.threads) {
      if (n == current_.threads) continue;
      RunConfig c = current_;
      c.threads = n;
      const TrialOutcome& out = measured(c, "threads");
      tried << (tried.tellp() > 0 ? ", " : "") << n << " threads "
            << format_fixed(sps(out), 1) << " samples/s";
      if (better(out, best_out)) {
        best = c;
        best_out = out;
      }
    }
    const bool changed = best.threads != current_.threads;
    finish_stage("threads", before, sps(best_out), changed,
                 tried.str() + (changed ? ": " + std::to_string(best.threads) + " threads"
                                        : ": kept the current threads"));
    adopt(best, best_out);
  }

  // The evaluation batch: evaluation keeps no activations for a backward pass, so it fits far
  // larger batches than training; the largest that is safe with the training state resident
  // and within eval_tolerance of the fastest is taken (larger batches evaluate in fewer passes,
  // but on a CPU throughput often falls past the caches).
  void eval_batch() {
    const double sps_now = sps(current_out_);
    const int64_t split = o_.eval_samples;
    const int64_t user = current_.train.eval_batch_size;
    auto no_split = [&] {
      finish_stage("eval_batch", sps_now, sps_now, false,
                   "no validation split to measure evaluation on: kept batch " +
                       std::to_string(user));
    };
    if (split <= 0) return no_split();
    std::vector<int64_t> candidates;
    if (!o_.tune_eval_batch) {
      candidates = {user};
    } else {
      for (int64_t b = std::max<int64_t>(1, current_.micro_batch()); b > 0; b *= 2) {
        candidates.push_back(std::min(b, std::max<int64_t>(1, split)));
        if (b >= split) break;
      }
    }
    struct Point {
      int64_t batch;
      EvalTrial t;
    };
    std::vector<Point> points;
    std::ostringstream tried;
    // A candidate may take at most a twentieth of the budget (of a minute without one).
    const double cap_s = o_.budget_s > 0 ? o_.budget_s / 20.0 : 60.0;
    for (int64_t b : candidates) {
      check_stop();
      if (!points.empty()) {
        const Point& last = points.back();
        const double predicted_s =
            static_cast<double>((1 + o_.eval_batches) * b) / std::max(1e-9, last.t.samples_per_s);
        if (predicted_s > cap_s || search_time_spent()) {
          tried << "; stopped before " << b << " (about " << format_fixed(predicted_s, 1)
                << " s)";
          break;
        }
      }
      const EvalTrial t = runner_.evaluate(current_, b, o_.eval_batches);
      if (!t.measured) return no_split();
      const bool ok = t.fits && t.peak_memory_bytes <= target_bytes();
      tried << (tried.tellp() > 0 ? ", " : "") << b << ": "
            << (t.fits ? format_fixed(t.samples_per_s, 1) + " samples/s, peak " +
                             format_bytes(t.peak_memory_bytes)
                       : std::string("out of memory"))
            << (t.fits && !ok ? " (over the limit less reserve)" : "");
      if (!ok) break;
      points.push_back({b, t});
    }
    int64_t chosen = 0;
    double fastest = 0;
    for (const Point& pt : points) fastest = std::max(fastest, pt.t.samples_per_s);
    for (const Point& pt : points)
      if (pt.t.samples_per_s >= fastest * (1.0 - o_.eval_tolerance)) chosen = pt.batch;
    std::string why;
    if (chosen == 0) {
      // Not even the first candidate evaluates under the limit: the smallest batch is the
      // safest there is, and the final check reports what training itself peaks at.
      chosen = std::min<int64_t>(user, std::max<int64_t>(1, current_.micro_batch()));
      why = tried.str() + ": nothing measured fits; evaluation batch " + std::to_string(chosen);
    } else {
      why = "inference mode with the training state resident: " + tried.str() + ": batch " +
            std::to_string(chosen) +
            (o_.tune_eval_batch ? std::string(", the largest within ") +
                                      pct(o_.eval_tolerance) + " of the fastest"
                                : std::string(" (your --eval-batch-size) fits"));
    }
    const bool changed = chosen != user;
    current_.train.eval_batch_size = chosen;
    if (has_safe_) last_safe_.train.eval_batch_size = chosen;
    plan_.eval_samples_per_s = 0;
    for (const Point& pt : points)
      if (pt.batch == chosen) {
        plan_.eval_samples_per_s = pt.t.samples_per_s;
        plan_.eval_peak_memory_bytes = pt.t.peak_memory_bytes;
      }
    finish_stage("eval_batch", sps_now, sps_now, changed, why);
  }

  // Every stage kept the fastest of several noisy measurements, so the numbers it kept lean
  // high (the winner's curse). The plan's numbers come from fresh runs of the tuned and the
  // user's configuration, which nothing selected: two interleaved rounds, so that a moment of
  // interference (another process taking the cores) cannot decide alone. Each configuration is
  // reported by the mean of its rounds; the user's is restored only if it won both rounds.
  void confirm() {
    const double before = sps(current_out_);
    const bool with_base = base_fits_ && base_.describe() != current_.describe();
    constexpr int kRounds = 2;
    const double step_s = static_cast<double>(current_.train.batch_size) / std::max(1e-9, before);
    const double cost_s =
        static_cast<double>(o_.measure_steps * kRounds * (with_base ? 2 : 1)) * step_s;
    if (cost_s > left_s()) {
      finish_stage("confirm", before, before, false,
                   "skipped: a fresh measurement (about " + format_fixed(cost_s, 0) +
                       " s) does not fit in the budget left; the stages' numbers stand");
      return;
    }
    auto fresh = [&](const RunConfig& c) {
      check_stop();
      TrialRequest req;
      req.config = c;
      req.steps = o_.measure_steps;
      req.warmup_steps = 1;
      TrialOutcome t = runner_.run(req);
      record("confirm", "measure", c, t);
      return t;
    };
    // The mean of the rounds' samples/s; an out-of-memory round makes the whole one so.
    auto fold = [&](TrialOutcome& kept, const TrialOutcome& t, int round) {
      if (round == 0 || !t.fits) {
        kept = t;
        return;
      }
      if (!kept.fits) return;
      const double mean = (sps(kept) * round + sps(t)) / (round + 1);
      const int64_t peak = std::max(kept.measurement.peak_memory_bytes,
                                    t.measurement.peak_memory_bytes);
      kept = t;
      kept.measurement.samples_per_s = mean;
      kept.measurement.peak_memory_bytes = peak;
    };
    TrialOutcome tuned, base;
    int base_wins = 0;
    std::ostringstream rounds;
    for (int r = 0; r < kRounds; ++r) {
      const TrialOutcome t = fresh(current_);
      fold(tuned, t, r);
      if (!t.fits) break;
      rounds << (r ? "; " : "") << format_fixed(sps(t), 1);
      if (!with_base) continue;
      const TrialOutcome u = fresh(base_);
      fold(base, u, r);
      if (!u.fits) continue;
      rounds << " vs yours " << format_fixed(sps(u), 1);
      if (safe(u) && better(u, t)) ++base_wins;
    }
    if (!tuned.fits) {
      finish_stage("confirm", before, before, false,
                   current_.describe() + " ran out of memory when measured again");
      current_out_ = tuned;  // the memory check falls back to the last safe configuration
      return;
    }
    std::string why = current_.describe() + " measured again in " + std::to_string(kRounds) +
                      " rounds: " + rounds.str() + " samples/s (the stages' estimate " +
                      format_fixed(before, 1) + ")";
    // The plan is the user's configuration: one measurement is both numbers, or the plan
    // would promise a speed-up from comparing a stage's timing with a fresh one.
    if (!with_base && base_fits_) set_measured(plan_.baseline, tuned);
    if (with_base && base.fits) {
      set_measured(plan_.baseline, base);
      if (base_wins == kRounds) {
        // The user's own configuration needs no guard; the tuned evaluation batch stays.
        finish_stage("confirm", before, sps(base), true,
                     why + ": yours, " + base_.describe() +
                         ", is faster beyond noise in every round, the plan keeps it");
        const int64_t eval_batch = current_.train.eval_batch_size;
        current_ = base_;
        current_.train.eval_batch_size = eval_batch;
        current_out_ = base;
        plan_.effective_batch = "unchanged";
        plan_.effective_batch_why = "the tuned configuration measured slower than yours";
        // What the guard judged is no longer the plan: the user's recipe needs no check.
        plan_.quality.accepted = true;
        plan_.quality.status = "not_run";
        plan_.quality.why = "nothing to check: the plan keeps your configuration (" +
                            plan_.quality.why + ", for the configuration not taken)";
        return;
      }
    }
    finish_stage("confirm", before, sps(tuned), false, why);
    current_out_ = tuned;
  }

  // The configuration the user would have trained: the base, or when it does not fit, the base
  // split into micro-batches that do.
  RunConfig reference() const {
    RunConfig ref = base_;
    if (!base_fits_ && search_.largest_safe > 0) {
      const int64_t micro = std::max<int64_t>(1, search_.largest_safe / 2);
      ref.train.accumulate = (ref.train.batch_size + micro - 1) / micro;
    }
    return ref;
  }

  // The user's optimisation with this tune's math-preserving settings: the input pipeline,
  // threads (the Loader's batches do not depend on its workers), the memory format and, where
  // the batch does not fit at once, accumulation. Guard runs use it as their baseline; an unaffordable or failed
  // guard falls back to it.
  RunConfig safe_reference() const {
    RunConfig ref = reference();
    ref.workers = current_.workers;
    ref.prefetch = current_.prefetch;
    ref.threads = current_.threads;
    ref.train.memory_format = current_.train.memory_format;
    // The evaluation batch measured with the training state resident (eval_batch stage):
    // evaluation's numbers in the plan are for it.
    ref.train.eval_batch_size = current_.train.eval_batch_size;
    return ref;
  }

  // Samples/s of a configuration as measured so far (0 when it has not been).
  double known_sps(const RunConfig& c) const {
    auto it = cache_.find(c.describe());
    return it == cache_.end() ? 0.0 : sps(it->second);
  }

  void fall_back(const RunConfig& ref, const std::string& why_policy) {
    const TrialOutcome& out = measured(ref, "quality_guard");
    plan_.effective_batch = ref.train.accumulate > 1 ? "kept" : "unchanged";
    plan_.effective_batch_why = why_policy;
    adopt(ref, out);
  }

  void quality_guard() {
    QualityCheck& q = plan_.quality;
    q.tolerance = o_.quality_tolerance;
    const double after = sps(current_out_);
    if (o_.quality_samples <= 0) {
      q.status = "not_run";
      q.why = "not run (no quality samples asked for)";
      finish_stage("quality_guard", after, after, false, q.why);
      return;
    }
    if (current_.train.batch_size == base_.train.batch_size &&
        current_.train.precision == base_.train.precision && current_.train.lr == base_.train.lr) {
      q.accepted = true;
      q.status = "not_run";
      q.why = "nothing to check: batch, precision and learning rate are the user's";
      finish_stage("quality_guard", after, after, false, q.why);
      return;
    }
    const RunConfig ref = safe_reference();
    // Candidates from the tuned configuration back towards the user's: first undo the
    // effective-batch change, then the precision.
    std::vector<RunConfig> candidates = {current_};
    if (plan_.effective_batch == "lr_rescaled") {
      RunConfig c = current_;
      c.train.batch_size = ref.train.batch_size;
      c.train.lr = ref.train.lr;
      c.train.accumulate = ref.train.accumulate;
      c.train.warmup_steps = ref.train.warmup_steps;
      candidates.push_back(c);
    }
    if (current_.train.precision != ref.train.precision) {
      RunConfig c = candidates.back();
      c.train.precision = ref.train.precision;
      candidates.push_back(c);
    }
    // Size the runs to the budget left: two baseline seeds (the metric's own noise) and every
    // candidate, each costing samples / samples/s and a margin for building and evaluating.
    const double slowest = std::max(1e-9, std::min(sps(current_out_), std::max(
        known_sps(ref), plan_.baseline.samples_per_s)));
    // A configuration not measured yet is assumed as slow as the slowest one that was.
    auto seconds_per_sample_of = [&](const RunConfig& c) {
      const double v = known_sps(c);
      return 1.0 / (v > 0 ? v : slowest);
    };
    double seconds_per_sample = 2.0 * seconds_per_sample_of(ref);  // the baseline's two seeds
    int64_t largest_batch = ref.train.batch_size;
    for (const RunConfig& c : candidates) {
      seconds_per_sample += seconds_per_sample_of(c);
      largest_batch = std::max(largest_batch, c.train.batch_size);
    }
    const double left = left_s();
    const int64_t needed = o_.min_quality_steps * largest_batch;
    int64_t samples = std::max(o_.quality_samples, needed);
    if (std::isfinite(left)) {
      // Each run also evaluates the validation split (inference: about twice a training
      // step's samples/s, conservatively).
      const double eval_s = static_cast<double>(2 + candidates.size()) *
                            static_cast<double>(o_.eval_samples) / (2.0 * slowest);
      const double affordable =
          std::max(0.0, 0.8 * left - eval_s) / (1.15 * seconds_per_sample);
      samples = static_cast<int64_t>(std::min(static_cast<double>(samples), affordable));
    }
    if (samples < needed) {
      q.status = "unaffordable";
      q.why = "not run: " + format_fixed(std::max(0.0, left), 0) + " s of the --budget-s " +
              format_fixed(o_.budget_s, 0) + " s is left, enough for " +
              std::to_string(std::max<int64_t>(0, samples)) + " training samples per run (" +
              std::to_string(2 + candidates.size()) + " runs); a meaningful guard needs " +
              std::to_string(needed) + " (" + std::to_string(o_.min_quality_steps) +
              " steps of batch " + std::to_string(largest_batch) +
              "); kept only changes that leave the optimisation as it was: " + ref.describe();
      fall_back(ref, "the quality guard could not run in the budget, so the batch, precision "
                     "and learning rate stay yours");
      finish_stage("quality_guard", after, sps(current_out_), true, q.why);
      return;
    }
    q.samples = samples;
    check_stop();
    const QualityRun b = runner_.train_and_validate(ref, samples);
    check_stop();
    RunConfig ref2 = ref;
    ref2.train.seed = ref.train.seed + 1;
    const QualityRun b2 = runner_.train_and_validate(ref2, samples);
    if (!b.fits || !b2.fits) {
      q.status = "rejected";
      q.why = "the baseline ran out of memory in its quality run; kept " + ref.describe();
      fall_back(ref, "the quality guard could not run the baseline");
      finish_stage("quality_guard", after, sps(current_out_), true, q.why);
      return;
    }
    q.baseline = b.validation_metric;
    q.baseline_loss = b.final_loss;
    q.baseline_losses = b.losses;
    q.metric_noise = std::fabs(b.validation_metric - b2.validation_metric);
    q.loss_noise = b.final_loss > 0 ? std::fabs(b.final_loss - b2.final_loss) / b.final_loss : 0;
    // A tolerance tighter than the metric's scatter between seeds would reject by chance.
    const double metric_tol = std::max(o_.quality_tolerance, 2.0 * q.metric_noise);
    const double loss_tol = std::max(o_.loss_tolerance, 2.0 * q.loss_noise);
    q.tolerance = metric_tol;
    plan_.baseline.validation_metric = b.validation_metric;
    plan_.baseline.final_loss = b.final_loss;
    // Runs so short that two seeds of the same configuration disagree by several tolerances
    // cannot tell a harmful change from a harmless one: say so rather than accept anything.
    if (metric_tol > o_.max_tolerance_factor * o_.quality_tolerance) {
      q.status = "inconclusive";
      q.why = std::to_string(samples) + " training samples per run (what the budget affords): "
              "seed-to-seed noise: the baseline's two seeds differ by " + format_fixed(100 * q.metric_noise, 2) +
              " points of " + q.metric + ", more than " +
              format_fixed(o_.max_tolerance_factor / 2 * 100 * o_.quality_tolerance, 1) +
              " points, so these runs cannot judge a change; kept only changes that leave the "
              "optimisation as it was: " + ref.describe() +
              " (a larger --budget-s or --quality-samples buys longer runs)";
      fall_back(ref, "the quality guard's runs were too short to judge the batch change");
      finish_stage("quality_guard", after, sps(current_out_), true, q.why);
      return;
    }
    std::ostringstream why;
    why << samples << " training samples per run; seed-to-seed noise " << q.metric
        << " " << format_fixed(100 * q.metric_noise, 2) << " points, loss "
        << pct(q.loss_noise) << ": rejects an accuracy drop above "
        << format_fixed(100 * metric_tol, 2) << " points or a loss rise above " << pct(loss_tol);
    for (size_t i = 0; i < candidates.size(); ++i) {
      const RunConfig& c = candidates[i];
      check_stop();
      const QualityRun t = runner_.train_and_validate(c, samples);
      why << "; " << c.describe() << ", lr " << format_fixed(c.train.lr, 6) << ": ";
      if (!t.fits || (t.peak_memory_bytes > 0 && t.peak_memory_bytes > target_bytes())) {
        why << "rejected (out of memory in its quality run)";
        continue;
      }
      const bool finite = std::isfinite(t.final_loss) && std::isfinite(t.validation_metric);
      const bool metric_ok = finite && t.validation_metric >= b.validation_metric - metric_tol;
      // Relative, with an absolute floor: near-zero losses differ by large ratios of nothing.
      const bool loss_ok =
          finite && t.final_loss <= b.final_loss + std::max(loss_tol * b.final_loss, 0.01);
      why << q.metric << " " << format_fixed(100 * t.validation_metric, 2) << "% vs "
          << format_fixed(100 * b.validation_metric, 2) << "%, loss "
          << format_fixed(t.final_loss, 4) << " vs " << format_fixed(b.final_loss, 4);
      if (metric_ok && loss_ok) {
        q.accepted = true;
        q.status = "accepted";
        q.tuned = t.validation_metric;
        q.tuned_loss = t.final_loss;
        q.tuned_losses = t.losses;
        plan_.tuned.validation_metric = t.validation_metric;
        plan_.tuned.final_loss = t.final_loss;
        why << ": accepted";
        if (i > 0) {
          plan_.effective_batch = c.train.accumulate > 1 ? "kept" : "unchanged";
          plan_.effective_batch_why = "the quality guard rejected the rescaled batch";
        }
        const TrialOutcome& out = measured(c, "quality_guard");
        adopt(c, out);
        break;
      }
      why << ": rejected (" << (metric_ok ? "" : "accuracy drop above the tolerance")
          << (!metric_ok && !loss_ok ? ", " : "") << (loss_ok ? "" : "loss rise above the tolerance")
          << ")";
    }
    if (!q.accepted) {
      q.status = "rejected";
      q.tuned = b.validation_metric;
      q.tuned_loss = b.final_loss;
      q.tuned_losses = b.losses;
      why << "; fell back to " << ref.describe();
      fall_back(ref, "every tuned candidate failed the quality guard");
    }
    q.why = why.str();
    finish_stage("quality_guard", after, sps(current_out_),
                 current_.describe() != candidates[0].describe() ||
                     current_.train.lr != candidates[0].train.lr,
                 q.why);
  }

  TrialRunner& runner_;
  RunConfig base_;
  TuneOptions o_;
  std::function<void(const PlanStage&)> on_stage_;
  Clock::time_point start_;
  Plan plan_;
  RunConfig current_;
  TrialOutcome current_out_;
  RunConfig last_safe_;
  TrialOutcome last_safe_out_;
  bool has_safe_ = false;
  bool base_fits_ = false;
  BatchSearchResult search_;
  std::map<std::string, TrialOutcome> cache_;
};

}  // namespace

Plan tune(TrialRunner& runner, const RunConfig& base, const TuneOptions& options,
          const std::function<void(const PlanStage&)>& on_stage) {
  return Tuner(runner, base, options, on_stage).run();
}

}  // namespace saturate
