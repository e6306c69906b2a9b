// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/goodput.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"

namespace saturate {

using detail::concat;

namespace {

// Which batches the guard's search may still take, and at what φ.
struct Limits {
  double credit = std::numeric_limits<double>::infinity();  ///< a ceiling on the φ credited
  /// When finite: the φ credited whatever the probe said (a guard run measured more).
  double phi = std::numeric_limits<double>::quiet_NaN();
  int64_t below = std::numeric_limits<int64_t>::max();  ///< candidates are smaller than this
  int64_t above = 0;  ///< and larger than this, and must beat its predicted speed-up
};

// The choice's one line: φ as measured and credited, and the chosen batch's numbers, or the
// best larger batch's and why it does not pay.
void explain(GoodputChoice& g, const Limits& lim, double x0, double min_gain) {
  const NoiseScaleEstimate& noise = g.noise;
  const int64_t b0 = g.b0, below = lim.below;
  const std::string phi =
      "φ " + (std::isfinite(noise.phi) ? format_fixed(noise.phi, 0) : std::string("∞")) +
      " (95%: " + format_fixed(noise.low, 0) + "–" +
      (std::isfinite(noise.high) ? format_fixed(noise.high, 0) : std::string("∞")) + ", " +
      g.noise_kind + "), credited " + format_fixed(g.phi_used, 0) +
      (std::isfinite(lim.phi) || lim.credit < (noise.is_resolved() ? noise.phi : noise.low)
           ? " (what the guard's runs measured)"
           : "");
  if (g.chosen == b0) {
    // The best larger batch and why it does not pay.
    const GoodputPoint* best = nullptr;
    for (const GoodputPoint& p : g.curve)
      if (p.batch > b0 && p.batch < below && (!best || p.speedup > best->speedup)) best = &p;
    g.why = best ? concat(phi, ": batch ", best->batch, " runs ",
                          format_fixed(best->samples_per_s / x0, 2), "× the samples/s of ", b0,
                          " but each sample is worth ", format_fixed(best->efficiency, 2),
                          ", so it is predicted ", format_fixed(best->speedup, 2),
                          "× as fast to the target (needs ≥ ", format_fixed(1 + min_gain, 2), ")")
                 : concat(phi, ": no batch above ", b0, " was measured");
    return;
  }
  const GoodputPoint* at = nullptr;
  for (const GoodputPoint& p : g.curve)
    if (p.batch == g.chosen) at = &p;
  g.why = concat(phi, ": batch ", g.chosen, " runs ", format_fixed(at->samples_per_s / x0, 2),
                 "× the samples/s of ", b0, " with each sample worth ",
                 format_fixed(at->efficiency, 2), ": predicted ",
                 format_fixed(g.predicted_speedup, 2), "× as fast to the target; learning rate ×",
                 format_fixed(g.lr_multiplier, 2), " (gain ", format_fixed(g.gain, 2), ", ",
                 g.rule, ")");
}

// choose_by_goodput, with only the batches the limits leave as candidates (the guard's search);
// every measured batch ≥ b0 stays on the curve, at the φ credited.
GoodputChoice choose(const std::vector<std::pair<int64_t, double>>& curve, int64_t b0,
                     const NoiseScaleEstimate& noise, const std::string& noise_kind,
                     OptimizerKind optimizer, double min_gain, const Limits& lim) {
  const double credit = lim.credit;
  GoodputChoice g;
  g.noise = noise;
  g.noise_kind = noise_kind;
  g.b0 = b0;
  g.chosen = b0;
  g.rule = gain_rule_name(optimizer);
  // An interval without an upper end still has a lower one: credit that (a larger batch then
  // has to pay for itself almost sample for sample).
  if (noise.steps < kNoiseMinSteps || !std::isfinite(noise.low) || noise.low < 0) {
    g.why = noise.steps == 0 ? "no gradient noise scale was measured"
                             : "the gradient noise scale has no lower bound (" +
                                   std::to_string(noise.steps) + " steps)";
    return g;
  }
  double x0 = 0;
  for (const auto& [b, sps] : curve)
    if (b == b0) x0 = sps;
  if (x0 <= 0) {
    g.why = "batch " + std::to_string(b0) + " has no throughput measurement";
    return g;
  }
  g.usable = true;
  // A resolved estimate is credited at its value: a batch it over-credits loses in the quality
  // guard's run at equal time, which measures the efficiency and corrects φ (choose_below).
  // An unresolved one (no upper end) only at its lower end.
  g.phi_used = std::isfinite(lim.phi)
                    ? lim.phi
                    : std::min(noise.is_resolved() ? noise.phi : noise.low, std::max(0.0, credit));
  double floor = 1;  // the predicted speed-up a candidate must beat: the user's batch, or `above`
  for (const auto& [b, sps] : curve) {
    if (b < b0 || sps <= 0) continue;
    GoodputPoint p;
    p.batch = b;
    p.samples_per_s = sps;
    p.efficiency = batch_efficiency(g.phi_used, static_cast<double>(b0), static_cast<double>(b));
    p.speedup = sps * p.efficiency / x0;
    g.curve.push_back(p);
    if (b == lim.above) floor = p.speedup;
  }
  double best = floor;
  for (const GoodputPoint& p : g.curve) {
    const int64_t b = p.batch;
    if (b > std::max(b0, lim.above) && b < lim.below && p.speedup >= floor * (1.0 + min_gain) &&
        p.speedup > best) {
      g.chosen = b;
      best = p.speedup;
    }
  }
  if (g.chosen != b0) g.predicted_speedup = best;
  g.gain = gain_ratio(g.phi_used, static_cast<double>(b0), static_cast<double>(g.chosen));
  g.lr_multiplier = gain_lr_multiplier(g.gain, optimizer);
  explain(g, lim, x0, min_gain);
  return g;
}

}  // namespace

GoodputChoice choose_by_goodput(const std::vector<std::pair<int64_t, double>>& curve, int64_t b0,
                                const NoiseScaleEstimate& noise, const std::string& noise_kind,
                                OptimizerKind optimizer, double min_gain, double credit) {
  Limits lim;
  lim.credit = credit;
  return choose(curve, b0, noise, noise_kind, optimizer, min_gain, lim);
}

namespace {

// The guard's next choice on `g`'s measured curve, within `lim`; the branches stay on record.
GoodputChoice choose_again(const GoodputChoice& g, const Limits& lim, OptimizerKind optimizer,
                           double min_gain = kGoodputMinGain) {
  std::vector<std::pair<int64_t, double>> curve;
  for (const GoodputPoint& p : g.curve) curve.emplace_back(p.batch, p.samples_per_s);
  GoodputChoice next = choose(curve, g.b0, g.noise, g.noise_kind, optimizer, min_gain, lim);
  next.branches = g.branches;
  return next;
}

}  // namespace

GoodputChoice choose_below(const GoodputChoice& g, int64_t below, double phi,
                           OptimizerKind optimizer) {
  Limits lim;
  lim.credit = phi;
  lim.below = below;
  return choose_again(g, lim, optimizer);
}

GoodputChoice choose_above(const GoodputChoice& g, int64_t above, double phi,
                           OptimizerKind optimizer, double min_gain) {
  Limits lim;
  lim.phi = std::max(0.0, phi);
  lim.above = above;
  return choose_again(g, lim, optimizer, min_gain);
}

namespace {

// A run's loss after k steps as the guard defines its final loss: the mean of its last
// max(1, k/5) losses. prefix[i] is the sum of the first i losses.
double window_loss(const std::vector<double>& prefix, size_t k) {
  const size_t w = std::max<size_t>(1, k / 5);
  return (prefix[k] - prefix[k - w]) / static_cast<double>(w);
}

std::vector<double> prefix_sums(const std::vector<double>& v) {
  std::vector<double> p(v.size() + 1, 0.0);
  for (size_t i = 0; i < v.size(); ++i) p[i + 1] = p[i] + v[i];
  return p;
}

}  // namespace

MeasuredEfficiency measure_efficiency(const std::vector<std::vector<double>>& reference_losses,
                                      int64_t b0, const std::vector<double>& losses,
                                      int64_t batch) {
  MeasuredEfficiency m;
  if (losses.empty() || b0 <= 0 || batch <= 0) return m;
  const std::vector<double> own = prefix_sums(losses);
  const double final_loss = window_loss(own, losses.size());
  if (!std::isfinite(final_loss)) {
    m.diverged = true;
    return m;
  }
  double efficiency_sum = 0;
  int references = 0;
  const double samples = static_cast<double>(losses.size()) * static_cast<double>(batch);
  for (const std::vector<double>& ref : reference_losses) {
    if (ref.empty()) continue;
    const std::vector<double> p = prefix_sums(ref);
    if (!std::isfinite(p.back())) continue;
    // No further than the reference got in its first 5% of steps: the run made no progress,
    // which is a broken learning rate rather than a noisy gradient.
    const size_t early = std::max<size_t>(1, ref.size() / 20);
    if (final_loss >= window_loss(p, early)) {
      m.diverged = true;
      return m;
    }
    size_t k = 1;
    while (k <= ref.size() && window_loss(p, k) > final_loss) ++k;
    if (k <= ref.size()) {
      // The reference's samples to the candidate's last loss, over the candidate's samples.
      efficiency_sum += static_cast<double>(k) * static_cast<double>(b0) / samples;
    } else {
      // The candidate went below every loss the reference reached: measured the other way,
      // the reference's samples over the candidate's samples to the reference's last loss.
      const double ref_final = window_loss(p, ref.size());
      size_t kc = 1;
      while (kc < losses.size() && window_loss(own, kc) > ref_final) ++kc;
      const double ref_samples = static_cast<double>(ref.size()) * static_cast<double>(b0);
      efficiency_sum += ref_samples / (static_cast<double>(kc) * static_cast<double>(batch));
      m.crossed_late = true;
    }
    ++references;
  }
  if (references == 0) return m;
  m.efficiency = efficiency_sum / references;
  return m;
}

double phi_from_efficiency(double efficiency, double b0, double b) {
  if (!(efficiency < 1)) return std::numeric_limits<double>::infinity();
  if (efficiency <= b0 / b) return 0;
  return (b * efficiency - b0) / (1 - efficiency);
}

}  // namespace saturate
