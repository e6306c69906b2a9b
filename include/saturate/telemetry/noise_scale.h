// SPDX-License-Identifier: Apache-2.0
#pragma once
// The gradient noise scale φ = tr(Σ)/|G|² (McCandlish et al. 2018, "B_simple"): the batch size
// at which a step's gradient noise matches its signal. Below it a larger batch buys nearly
// proportionally fewer steps; far above it extra samples add little.
//
// Each measured step gives two squared gradient norms taken at the same weights: of the mean
// gradient of b_small samples and of b_big samples (a first micro-batch and the whole step
// under accumulation; one rank's and the all-reduced gradient under data parallelism). Since
// E|G_B|² = |G|² + tr(Σ)/B, each pair gives unbiased estimates of |G|² and tr(Σ); their ratio
// is taken only after averaging numerator and denominator separately.
//
//   NoiseScale gns;
//   if (auto s = noise_sample({small_sqr, big_sqr, 16, 64})) gns.add(*s);
//   NoiseScaleEstimate e = gns.estimate();   // φ with a 95% interval

#include <cstdint>
#include <deque>
#include <limits>
#include <optional>

namespace saturate {

/// Two squared L2 norms of mean gradients at the same weights, and how many samples each
/// averaged (b_small < b_big).
struct NormPair {
  double small_sqr = 0, big_sqr = 0;
  double b_small = 0, b_big = 0;
};

/// One step's unbiased estimates of |G|² and tr(Σ) (either may come out negative alone).
struct NoiseSample {
  double grad_sqr = 0;  ///< |G|²
  double trace = 0;     ///< tr(Σ), the per-sample gradient variance summed over parameters
};

/// The estimates of one pair; nullopt when a norm is not finite (an fp16 overflow) or the batch
/// sizes do not make a pair.
std::optional<NoiseSample> noise_sample(const NormPair& p);

/// φ over a window of steps, with a 95% interval from batch means (blocks of consecutive steps,
/// so that steps' correlation does not shrink it). `high` is +inf when |G|² is not resolved from
/// zero: φ may then be anything above `low`.
struct NoiseScaleEstimate {
  double phi = std::numeric_limits<double>::quiet_NaN();
  double low = std::numeric_limits<double>::quiet_NaN();
  double high = std::numeric_limits<double>::quiet_NaN();
  int64_t steps = 0;        ///< measured steps in the window
  double b_small = 0, b_big = 0;  ///< the batch sizes of the last pair
  /// A value to act on: at least kNoiseMinSteps steps, φ positive and an upper bound.
  bool is_resolved() const;
};

/// Steps an estimate wants before it is called resolved.
inline constexpr int64_t kNoiseMinSteps = 20;

class NoiseScale {
 public:
  /// `horizon`: the steps smoothed() sums over; `window`: the steps kept for estimate().
  explicit NoiseScale(size_t horizon = 200, size_t window = 1000);

  void add(const NoiseSample& s, double b_small, double b_big);
  /// Σ tr(Σ) / Σ |G|² over the last `horizon` steps (numerator and denominator summed apart, so
  /// one step's wild value is diluted rather than divided by, and old ones drop out): NaN
  /// before any step, +inf while the summed |G|² is not positive.
  double smoothed() const;
  /// φ over the more recent half of the kept steps (at least kNoiseMinSteps when there are
  /// that many): the noise scale grows as the loss falls, so the run's start would drag it
  /// down. With its 95% interval.
  NoiseScaleEstimate estimate() const;
  int64_t steps() const { return static_cast<int64_t>(window_.size()); }

 private:
  size_t horizon_, capacity_;
  double sum_sqr_ = 0, sum_trace_ = 0;  // over the last horizon_ steps
  size_t added_ = 0;
  std::deque<NoiseSample> window_;
  double b_small_ = 0, b_big_ = 0;
};

/// Statistical efficiency of a global batch `b` relative to `b0` (Pollux): the share of the
/// samples at b that make the same progress as at b0, (φ + b0)/(φ + b). 1 at b == b0 and for
/// φ = +inf (pure noise: every sample counts fully); b0/b as φ → 0; NaN for a NaN φ.
double batch_efficiency(double phi, double b0, double b);

struct StepRecord;
/// Feeds a step's measured per-step values (StepRecord's noise_* fields, where finite) to the
/// raw and the AdamW-preconditioned estimators.
void add_step_noise(const StepRecord& record, NoiseScale& raw, NoiseScale& precond);

/// AdaScale's gain ratio r = b(φ + b0)/(b0(φ + b)), in [1, b/b0] for b ≥ b0: how many b0-steps
/// of progress one b-step makes. +inf φ gives b/b0.
double gain_ratio(double phi, double b0, double b);

}  // namespace saturate
