// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/guard_rules.h"

#include <algorithm>
#include <cmath>

#include "saturate/tune/tuner.h"

namespace saturate {

GuardSizing size_guard(const GuardCost& cost, const TuneOptions& o, double left_s) {
  GuardSizing z;
  z.needed = o.min_quality_steps * cost.largest_batch;
  z.samples = std::max(o.quality_samples, z.needed);
  if (std::isfinite(left_s)) {
    const double eval_s = static_cast<double>(cost.runs) * static_cast<double>(o.eval_samples) /
                          (2.0 * std::max(1e-9, cost.slowest_samples_per_s));
    const double fixed_s = static_cast<double>(cost.runs) * cost.fixed_s_per_run;
    const double affordable = std::max(0.0, 0.8 * left_s - eval_s - fixed_s) /
                              (1.15 * std::max(1e-12, cost.seconds_per_sample));
    z.samples = static_cast<int64_t>(std::min(static_cast<double>(z.samples), affordable));
  }
  return z;
}

GuardTolerances guard_tolerances(const QualityRun& b, const QualityRun& b2, const TuneOptions& o) {
  GuardTolerances t;
  t.metric_noise = std::fabs(b.validation_metric - b2.validation_metric);
  t.loss_noise = b.final_loss > 0 ? std::fabs(b.final_loss - b2.final_loss) / b.final_loss : 0;
  t.metric = std::max(o.quality_tolerance, 2.0 * t.metric_noise);
  t.loss = std::max(o.loss_tolerance, 2.0 * t.loss_noise);
  t.conclusive = !(t.metric > o.max_tolerance_factor * o.quality_tolerance);
  return t;
}

std::string GuardVerdict::reasons() const {
  std::string s;
  auto add = [&](const char* r) { s += (s.empty() ? "" : ", ") + std::string(r); };
  if (!fits) add("out of memory in its quality run");
  if (fits && !metric_ok) add("accuracy drop above the tolerance");
  if (fits && !loss_ok) add("loss rise above the tolerance");
  return s;
}

GuardVerdict judge_candidate(const QualityRun& b, const QualityRun& t, const GuardTolerances& tol,
                             int64_t target_bytes) {
  GuardVerdict v;
  v.fits = t.fits && !(t.peak_memory_bytes > 0 && t.peak_memory_bytes > target_bytes);
  if (!v.fits) return v;
  const bool finite = std::isfinite(t.final_loss) && std::isfinite(t.validation_metric);
  v.metric_ok = finite && t.validation_metric >= b.validation_metric - tol.metric;
  v.loss_ok = finite && t.final_loss <= b.final_loss + std::max(tol.loss * b.final_loss, 0.01);
  return v;
}

}  // namespace saturate
