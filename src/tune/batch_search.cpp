// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/batch_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "saturate/core/error.h"
#include "saturate/core/units.h"
#include "saturate/tune/noise_rule.h"

namespace saturate {

Prefer parse_prefer(const std::string& text) {
  if (text == "faster") return Prefer::kFaster;
  if (text == "smaller") return Prefer::kSmaller;
  SATURATE_CHECK(false, "tune: --prefer must be faster or smaller, got '", text, "'");
  return Prefer::kFaster;
}

std::string to_string(Prefer p) { return p == Prefer::kFaster ? "faster" : "smaller"; }

namespace {

// Accumulated timed steps of one batch size (several measurements add up).
struct Throughput {
  double samples = 0, seconds = 0;
  std::vector<double> steps;  // samples/s of each timed step
  double mean() const { return seconds > 0 ? samples / seconds : 0.0; }
  // Relative standard deviation of one step, from these steps (0.05 when fewer than 3).
  double step_noise() const {
    const size_t n = steps.size();
    if (n < 3) return 0.05;
    double m = 0;
    for (double s : steps) m += s;
    m /= static_cast<double>(n);
    double var = 0;
    for (double s : steps) var += (s - m) * (s - m);
    var /= static_cast<double>(n - 1);
    return std::sqrt(var) / m;
  }
  // Relative standard error of the mean given the run's per-step noise; a floor of 0.5% keeps
  // a lucky run of identical steps from claiming certainty.
  double noise(double per_step) const {
    return std::max(0.005, per_step / std::sqrt(static_cast<double>(std::max<size_t>(1, steps.size()))));
  }
};

class Search {
 public:
  Search(TrialRunner& runner, const RunConfig& base, const BatchSearchOptions& o)
      : runner_(runner), base_(base), o_(o) {
    base_.train.accumulate = 1;
    limit_ = runner.memory_limit_bytes();
    target_ = static_cast<int64_t>(static_cast<double>(limit_) * (1.0 - o.reserve));
    cap_ = std::max<int64_t>(1, std::min(o.max_batch, runner.max_batch_size()));
    SATURATE_CHECK(o.reserve >= 0 && o.reserve < 1, "tune: --reserve must be in [0, 1), got ",
                   o.reserve);
    SATURATE_CHECK(o.noise_steps >= 4, "tune: the noise measurement needs >= 4 steps");
    SATURATE_CHECK(o.measure_steps >= 2, "tune: a throughput measurement needs >= 2 steps");
    SATURATE_CHECK(o.min_batch >= 1 && o.min_batch <= cap_, "tune: min batch ", o.min_batch,
                   " is outside [1, ", cap_, "]");
  }

  BatchSearchResult run() {
    find_largest_safe();
    measure_curve();
    choose();
    return std::move(result_);
  }

 private:
  bool safe(const TrialOutcome& t) const {
    return t.fits && t.measurement.peak_memory_bytes <= target_;
  }

  bool late() const { return o_.out_of_time && o_.out_of_time(); }

  // One measurement; one whose timed steps were too short to time is taken again, longer.
  TrialOutcome trial(int64_t batch, int64_t steps, const char* purpose) {
    const TrialOutcome t = trial_once(batch, steps, purpose);
    RunConfig at = base_;
    at.train.batch_size = batch;
    const int64_t longer = t.fits && steps > 1 ? steps_for_timed(o_.min_timed_s,
                                                                 t.measurement.samples_per_s,
                                                                 at.global_batch(), steps - 1)
                                               : 0;
    return longer > steps ? trial_once(batch, longer, "longer") : t;
  }

  TrialOutcome trial_once(int64_t batch, int64_t steps, const char* purpose) {
    if (o_.before_trial) o_.before_trial();
    TrialRequest req;
    req.config = base_;
    req.config.train.batch_size = batch;
    req.steps = steps;
    req.warmup_steps = steps > 1 ? 1 : 0;
    TrialOutcome t = runner_.run(req);
    result_.trials.push_back({purpose, req.config, t});
    result_.steps += t.steps_run;
    result_.ooms += t.fits ? 0 : 1;
    if (t.fits) {
      peaks_[batch] = std::max(peaks_[batch], t.measurement.peak_memory_bytes);
      if (steps > 1 && !t.measurement.step_samples_per_s.empty()) {
        Throughput& tp = curve_[batch];
        for (double s : t.measurement.step_samples_per_s) {
          tp.steps.push_back(s);
          tp.samples += static_cast<double>(batch);
          tp.seconds += static_cast<double>(batch) / s;
        }
      }
    }
    if (safe(t)) {
      safe_batches_.insert(batch);
    } else {
      hi_ = std::min(hi_, batch);
      safe_batches_.erase(batch);
    }
    // The largest batch that fitted under the target and lies below every failure.
    auto it = safe_batches_.lower_bound(hi_);
    lo_ = it == safe_batches_.begin() ? 0 : *std::prev(it);
    return t;
  }

  // Fits peak = fixed + per_sample × B through the largest batch measured and the largest one at
  // most two thirds of it: the local slope is the safer one to extrapolate when memory grows
  // faster than linearly, and points too close together turn peak noise into slope noise.
  bool fit() {
    if (peaks_.size() < 2) return false;
    const auto last = std::prev(peaks_.end());
    auto prev = peaks_.upper_bound(last->first * 2 / 3);
    if (prev == peaks_.begin()) return false;
    prev = std::prev(prev);
    const double db = static_cast<double>(last->first - prev->first);
    const double slope = static_cast<double>(last->second - prev->second) / db;
    if (!(slope > 0)) return false;
    result_.bytes_per_sample = slope;
    result_.fixed_bytes = static_cast<double>(last->second) - slope * static_cast<double>(last->first);
    return true;
  }

  // Aims 1% under the target, so peak noise on the verifying steps does not cost a round trip.
  int64_t predict() const {
    const double aim = 0.99 * static_cast<double>(target_);
    const double b = (aim - result_.fixed_bytes) / result_.bytes_per_sample;
    if (!(b >= 1)) return 1;
    return static_cast<int64_t>(std::min(std::floor(b), static_cast<double>(cap_)));
  }

  void find_largest_safe() {
    // 1. A first one-step probe, shrinking until something fits.
    int64_t b = std::min(o_.first_probe, cap_);
    while (true) {
      if (safe(trial(b, 1, "memory probe"))) break;
      SATURATE_CHECK(b > 1, "tune: one sample does not fit in ", format_bytes(target_), " (",
                     format_bytes(limit_), " memory limit less the ",
                     static_cast<int>(o_.reserve * 100 + 0.5),
                     "% reserve); raise --memory-limit or pick a smaller model");
      b = std::max<int64_t>(1, b / 4);
    }
    // Time bounds the batch: the probe's rate, doubled for the rise of the curve, says which
    // batch would take max_step_s per step.
    if (o_.max_step_s > 0 && !result_.trials.empty()) {
      const Measurement& m = result_.trials.back().outcome.measurement;
      if (m.samples_per_s > 0) {
        const auto by_time = static_cast<int64_t>(2.0 * m.samples_per_s * o_.max_step_s);
        cap_ = std::max(lo_, std::min(cap_, by_time));
      }
    }
    // 2. A second probe four times larger gives the slope; a third, further out, when the
    //    prediction lies far beyond both.
    for (int extra = 0; extra < 2 && lo_ < cap_ && lo_ * 4 < hi_; ++extra) {
      const int64_t next = std::min(cap_, lo_ * 4);
      if (extra == 1 && (!fit() || predict() < 16 * lo_)) break;
      trial(next, 1, "memory probe");
      if (peaks_.size() < 2) break;
    }
    result_.predicted = fit() ? std::max<int64_t>(1, predict()) : std::min(cap_, hi_ - 1);
    // 3. Verify with full measurements. Where the model undershot, refit and look further (at
    //    most twice); where it overshot, refit once, then bisect.
    int misses = 0, refits = 0;
    int64_t candidate = std::clamp(result_.predicted, int64_t{1}, std::min(cap_, hi_ - 1));
    for (int guard = 0; guard < 64 && candidate > lo_ && !(late() && lo_ > 0); ++guard) {
      // Several steps: the highest of their peaks decides, and their scatter is the noise.
      const TrialOutcome t = trial(candidate, o_.noise_steps, "verify");
      if (safe(t)) {
        const bool far_below =
            t.measurement.peak_memory_bytes < 0.95 * static_cast<double>(target_);
        if (refits >= 2 || !far_below || candidate >= std::min(cap_, hi_ - 1) || !fit()) break;
        const int64_t next = std::min({predict(), hi_ - 1, cap_});
        if (next <= static_cast<int64_t>(1.03 * static_cast<double>(candidate))) break;
        ++refits;
        candidate = next;
        continue;
      }
      ++misses;
      if (hi_ - lo_ <= std::max<int64_t>(1, lo_ / 50)) break;
      candidate = (lo_ + hi_) / 2;
      if (misses < 2 && fit()) candidate = std::clamp(predict(), lo_ + 1, hi_ - 1);
    }
    // The top must have timed steps of its own (it may so far have had a one-step probe only).
    // Noise can make a batch that fitted once fail now; then the next one down is the top.
    while (lo_ > 0 && (!point(lo_) || point(lo_)->steps.size() < 3)) {
      const int64_t top = lo_;
      if (safe(trial(top, o_.noise_steps, "verify"))) break;
    }
    SATURATE_CHECK(lo_ > 0, "tune: no batch size fits reliably under ", format_bytes(target_));
    result_.largest_safe = lo_;
  }

  const Throughput* point(int64_t b) const {
    auto it = curve_.find(b);
    return it == curve_.end() ? nullptr : &it->second;
  }

  double mean(int64_t b) const {
    const Throughput* t = point(b);
    return t ? t->mean() : 0.0;
  }

  // Measures `b` unless it already has timed steps; false when it did not fit.
  bool measure(int64_t b, const char* purpose = "throughput") {
    if (b < o_.min_batch || b > lo_) return false;
    if (point(b)) return true;
    const TrialOutcome t = trial(b, o_.measure_steps, purpose);
    return safe(t);
  }

  // Relative noise of the difference between two points.
  double noise_between(int64_t a, int64_t b) const {
    return std::hypot(point(a)->noise(step_noise_), point(b)->noise(step_noise_));
  }

  // Throughput at `b` smoothed over its neighbours in log2(batch) (Gaussian weights times each
  // point's timed steps): single noisy steps of nearby batches pool their evidence, where
  // comparing points pairwise would let one lucky step decide. The kernel narrows with the
  // noise (0.35 octave at 5% per step, 0.07 at 1%), since smoothing also blunts a sharp peak.
  double smoothed(int64_t b) const {
    const double width = 0.35 * std::clamp(step_noise_ / 0.05, 0.2, 1.0);
    double num = 0, den = 0;
    for (const auto& [other, tp] : curve_) {
      if (other > lo_) continue;
      const double d = std::log2(static_cast<double>(b) / static_cast<double>(other)) / width;
      const double w = static_cast<double>(tp.steps.size()) * std::exp(-0.5 * d * d);
      num += w * tp.mean();
      den += w;
    }
    return den > 0 ? num / den : 0.0;
  }

  // The measured batch with the highest smoothed throughput; within 0.5% the larger batch wins
  // (throughput rises with the batch until it saturates).
  int64_t best() const {
    int64_t best = 0;
    double best_value = 0;
    for (auto it = curve_.rbegin(); it != curve_.rend(); ++it) {
      const int64_t b = it->first;
      if (b > lo_) continue;  // measured, then found unsafe
      const double v = smoothed(b);
      if (best == 0 || v > best_value * 1.005) {
        best = b;
        best_value = v;
      }
    }
    return best;
  }

  void measure_curve() {
    const int64_t top = lo_;
    // The top was verified with several timed steps: their scatter is the noise estimate for
    // every point.
    if (const Throughput* t = point(top)) step_noise_ = t->step_noise();
    // Coarse: every quarter below the top until clearly past the best (throughput curves rise,
    // flatten and may fall past a cliff; the walk down crosses the peak once).
    for (int64_t b = top / 4; b >= o_.min_batch && b >= 1 && !late(); b /= 4) {
      if (!measure(b)) break;
      if (b != best() && clearly_slower(mean(b), smoothed(best()), point(b)->noise(step_noise_)))
        break;
    }
    // Refine around the best: its doubling and halving, then, where the peak lies below the
    // top (a cliff), √2 and 2^¼.
    for (double step : {2.0, std::sqrt(2.0), std::pow(2.0, 0.25)}) {
      const int64_t center = best();
      if (center == 0 || (step < 1.4 && center == top) || late()) break;
      // The top is the best and half of it is clearly slower: the curve rises into the top.
      if (step < 2 && center == top && point(top / 2) &&
          clearly_slower(mean(top / 2), mean(top), noise_between(top / 2, top)))
        break;
      const int64_t up = std::min(top, static_cast<int64_t>(std::llround(center * step)));
      const int64_t down = static_cast<int64_t>(std::llround(center / step));
      for (int64_t cand : {up, down}) {
        if (cand == center || cand < o_.min_batch || cand > top || point(cand)) continue;
        measure(cand);
      }
    }
    // Runoff: when the runner-up is within noise of the best, both are measured again, so a
    // single lucky or unlucky measurement does not decide.
    for (int round = 0; round < o_.max_repeats && !late(); ++round) {
      const int64_t lead = best();
      int64_t second = 0;
      for (const auto& [b, tp] : curve_)
        if (b <= lo_ && b != lead && (second == 0 || tp.mean() > mean(second))) second = b;
      if (second == 0) break;
      // Settled when the runner-up is clearly slower, or when the noise is below the
      // tolerance anyway (a runoff could not change what is chosen).
      const double noise = noise_between(lead, second);
      if (clearly_slower(mean(second), smoothed(lead), noise) || kNoiseSigmas * noise < o_.tolerance)
        break;
      trial(lead, o_.measure_steps, "repeat");
      trial(second, o_.measure_steps, "repeat");
    }
    if (o_.prefer == Prefer::kSmaller) {
      // Walk down by halves from the fastest while within the tolerance.
      for (int64_t b = best() / 2; b >= o_.min_batch && b >= 1 && !late(); b /= 2) {
        if (!measure(b)) break;
        if (mean(b) < mean(best()) * (1.0 - o_.tolerance)) break;
      }
    }
  }

  void choose() {
    const int64_t fastest = best();
    SATURATE_ASSERT(fastest > 0, "batch search measured no batch size");
    int64_t chosen = fastest;
    if (o_.prefer == Prefer::kSmaller) {
      for (const auto& [b, tp] : curve_) {
        if (b <= lo_ && tp.mean() >= mean(fastest) * (1.0 - o_.tolerance)) {
          chosen = b;
          break;  // ascending order: the first within tolerance is the smallest
        }
      }
    }
    result_.chosen = chosen;
    result_.samples_per_s = mean(chosen);
    result_.chosen_peak_memory_bytes = peaks_.count(chosen) ? peaks_.at(chosen) : 0;
    for (const auto& [b, tp] : curve_) {
      if (b > lo_) continue;
      result_.curve.push_back(
          {b, tp.mean(), tp.noise(step_noise_), static_cast<int64_t>(tp.steps.size())});
    }
    std::ostringstream why;
    why << "batch " << chosen << ": " << format_fixed(result_.samples_per_s, 1) << " samples/s";
    if (chosen == lo_) {
      why << ", the largest batch under " << format_bytes(target_) << " (limit less "
          << static_cast<int>(o_.reserve * 100 + 0.5) << "% reserve)";
    } else if (chosen == fastest && point(lo_)) {
      why << ", faster than the largest safe batch " << lo_ << " ("
          << format_fixed(mean(lo_), 1) << " samples/s)";
    } else if (chosen == fastest) {
      why << ", the fastest measured (largest safe batch " << lo_ << ")";
    } else {
      why << ", the smallest within " << format_fixed(o_.tolerance * 100, 1)
          << "% of the fastest (batch " << fastest << ", " << format_fixed(mean(fastest), 1)
          << " samples/s)";
    }
    result_.why = why.str();
  }

  TrialRunner& runner_;
  RunConfig base_;
  BatchSearchOptions o_;
  int64_t limit_ = 0, target_ = 0, cap_ = 0;
  int64_t lo_ = 0;                                     // largest batch verified safe
  int64_t hi_ = std::numeric_limits<int64_t>::max();  // smallest batch known unsafe
  std::set<int64_t> safe_batches_;
  std::map<int64_t, int64_t> peaks_;                   // batch → highest peak seen (fits only)
  std::map<int64_t, Throughput> curve_;
  double step_noise_ = 0.05;  // relative sd of one step's samples/s, from the top's steps
  BatchSearchResult result_;
};

}  // namespace

BatchSearchResult search_batch_size(TrialRunner& runner, const RunConfig& base,
                                    const BatchSearchOptions& options) {
  return Search(runner, base, options).run();
}

}  // namespace saturate
