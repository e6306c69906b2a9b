// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/noise_scale.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "saturate/telemetry/step_record.h"

namespace saturate {

void add_step_noise(const StepRecord& r, NoiseScale& raw, NoiseScale& precond) {
  if (std::isfinite(r.noise_grad_sqr) && std::isfinite(r.noise_trace))
    raw.add({r.noise_grad_sqr, r.noise_trace}, r.gns_b_small, r.gns_b_big);
  if (std::isfinite(r.noise_grad_sqr_precond) && std::isfinite(r.noise_trace_precond))
    precond.add({r.noise_grad_sqr_precond, r.noise_trace_precond}, r.gns_b_small, r.gns_b_big);
}

std::optional<NoiseSample> noise_sample(const NormPair& p) {
  if (!std::isfinite(p.small_sqr) || !std::isfinite(p.big_sqr)) return std::nullopt;
  if (!(p.b_small > 0) || !(p.b_big > p.b_small)) return std::nullopt;
  // E|G_B|² = |G|² + tr(Σ)/B at both sizes, solved for the two unknowns.
  NoiseSample s;
  s.grad_sqr = (p.b_big * p.big_sqr - p.b_small * p.small_sqr) / (p.b_big - p.b_small);
  s.trace = (p.small_sqr - p.big_sqr) / (1.0 / p.b_small - 1.0 / p.b_big);
  return s;
}

bool NoiseScaleEstimate::is_resolved() const {
  return steps >= kNoiseMinSteps && std::isfinite(phi) && phi > 0 && std::isfinite(high);
}

NoiseScale::NoiseScale(size_t horizon, size_t window)
    : horizon_(std::max<size_t>(horizon, 1)), capacity_(std::max({window, horizon_, size_t{2}})) {}

void NoiseScale::add(const NoiseSample& s, double b_small, double b_big) {
  window_.push_back(s);
  sum_sqr_ += s.grad_sqr;
  sum_trace_ += s.trace;
  if (window_.size() > horizon_) {
    const NoiseSample& out = window_[window_.size() - 1 - horizon_];
    sum_sqr_ -= out.grad_sqr;
    sum_trace_ -= out.trace;
  }
  if (window_.size() > capacity_) window_.pop_front();
  if (++added_ % horizon_ == 0) {
    // Now and then summed afresh: subtracting a huge early value leaves rounding behind.
    sum_sqr_ = sum_trace_ = 0;
    for (size_t i = window_.size() - std::min(horizon_, window_.size()); i < window_.size(); ++i) {
      sum_sqr_ += window_[i].grad_sqr;
      sum_trace_ += window_[i].trace;
    }
  }
  b_small_ = b_small;
  b_big_ = b_big;
}

double NoiseScale::smoothed() const {
  if (window_.empty()) return std::numeric_limits<double>::quiet_NaN();
  if (sum_sqr_ <= 0) return std::numeric_limits<double>::infinity();
  return std::max(sum_trace_, 0.0) / sum_sqr_;
}

namespace {

// Two-sided 95% Student t quantiles for 1..9 degrees of freedom; 1.96 beyond.
double t95(int64_t df) {
  static const double kT[] = {12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26};
  return df >= 1 && df <= 9 ? kT[df - 1] : 1.96;
}

}  // namespace

NoiseScaleEstimate NoiseScale::estimate() const {
  NoiseScaleEstimate e;
  e.b_small = b_small_;
  e.b_big = b_big_;
  if (window_.empty()) return e;
  // The recent half, and blocks of consecutive steps in it: up to 10 (single steps while
  // there are few).
  const size_t kept = window_.size();
  const size_t n = std::min(kept, std::max(kept / 2, static_cast<size_t>(kNoiseMinSteps)));
  const size_t skip = kept - n;
  e.steps = static_cast<int64_t>(n);
  const size_t blocks = std::min<size_t>(10, n);
  std::vector<double> sqr(blocks, 0), trace(blocks, 0);
  std::vector<size_t> count(blocks, 0);
  for (size_t i = 0; i < n; ++i) {
    const size_t b = i * blocks / n;
    sqr[b] += window_[skip + i].grad_sqr;
    trace[b] += window_[skip + i].trace;
    ++count[b];
  }
  double mean_sqr = 0, mean_trace = 0;
  for (size_t b = 0; b < blocks; ++b) {
    sqr[b] /= static_cast<double>(count[b]);
    trace[b] /= static_cast<double>(count[b]);
    mean_sqr += sqr[b] / static_cast<double>(blocks);
    mean_trace += trace[b] / static_cast<double>(blocks);
  }
  const double inf = std::numeric_limits<double>::infinity();
  if (mean_sqr <= 0) {
    e.phi = inf;  // no signal measured above the noise yet
    e.low = mean_trace > 0 ? 0 : std::numeric_limits<double>::quiet_NaN();
    e.high = inf;
    return e;
  }
  e.phi = std::max(mean_trace, 0.0) / mean_sqr;
  if (blocks < 2) {
    e.low = 0;
    e.high = inf;
    return e;
  }
  // The ratio's standard error by the delta method over the blocks, and |G|²'s own, which
  // decides whether φ has an upper bound at all.
  double var_resid = 0, var_sqr = 0;
  for (size_t b = 0; b < blocks; ++b) {
    const double resid = trace[b] - e.phi * sqr[b];
    var_resid += resid * resid;
    var_sqr += (sqr[b] - mean_sqr) * (sqr[b] - mean_sqr);
  }
  const double nb = static_cast<double>(blocks);
  const double t = t95(static_cast<int64_t>(blocks) - 1);
  const double se_phi = std::sqrt(var_resid / (nb - 1) / nb) / mean_sqr;
  const double se_sqr = std::sqrt(var_sqr / (nb - 1) / nb);
  e.low = std::max(0.0, e.phi - t * se_phi);
  e.high = mean_sqr - t * se_sqr > 0 ? e.phi + t * se_phi : inf;
  return e;
}

double batch_efficiency(double phi, double b0, double b) {
  if (std::isnan(phi) || !(b > 0) || !(b0 > 0)) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(phi)) return 1.0;
  return (phi + b0) / (phi + b);
}

double gain_ratio(double phi, double b0, double b) {
  const double e = batch_efficiency(phi, b0, b);
  return std::isnan(e) ? e : e * b / b0;
}

}  // namespace saturate
