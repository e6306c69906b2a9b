// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/simulated_device.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/core/units.h"
#include "saturate/telemetry/throughput.h"

namespace saturate {
namespace {

bool is_reduced(Precision p) { return p == Precision::kBf16 || p == Precision::kFp16; }

}  // namespace

SimulatedProfile SimulatedProfile::random(uint64_t seed, double max_step_noise) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + 12345);
  auto uniform = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  auto log_uniform = [&](double a, double b) { return std::exp(uniform(std::log(a), std::log(b))); };
  auto chance = [&](double p) { return uniform(0.0, 1.0) < p; };
  SimulatedProfile p;
  p.limit_bytes = static_cast<int64_t>(log_uniform(2.0, 80.0) * (1LL << 30));
  p.fixed_bytes = static_cast<int64_t>(uniform(0.05, 0.6) * static_cast<double>(p.limit_bytes));
  const double largest = log_uniform(4, 20000);  // batch that would fill the memory exactly
  p.per_sample_bytes = std::max<int64_t>(
      1, static_cast<int64_t>(static_cast<double>(p.limit_bytes - p.fixed_bytes) / largest));
  p.memory_superlinear = chance(0.3) ? uniform(0.0, 0.2) * 1024.0 / largest : 0.0;
  p.memory_noise = uniform(0.0, 0.03);
  p.peak_samples_per_s = log_uniform(100, 100000);
  p.half_batch = largest * log_uniform(0.002, 0.3);
  if (chance(0.4)) {
    p.cliff_batch = std::max<int64_t>(2, static_cast<int64_t>(largest * log_uniform(0.05, 0.7)));
    p.cliff_loss_per_doubling = uniform(0.05, 0.4);
  }
  p.step_noise = uniform(0.005, std::max(0.005, max_step_noise));
  p.bf16_speedup = uniform(0.8, 2.5);
  p.bf16_memory = uniform(0.5, 0.8);
  p.first_step_slowdown = uniform(1.2, 3.0);  // drawn last: earlier draws keep their values
  return p;
}

std::string SimulatedProfile::describe() const {
  std::ostringstream s;
  s << "limit " << format_bytes(limit_bytes) << ", fixed " << format_bytes(fixed_bytes)
    << ", " << format_bytes(per_sample_bytes) << "/sample, plateau " << peak_samples_per_s
    << " samples/s, half at " << half_batch;
  if (cliff_batch > 0) s << ", cliff at " << cliff_batch << " (-" << cliff_loss_per_doubling << "/doubling)";
  s << ", noise " << step_noise;
  return s.str();
}

int64_t SimulatedProfile::worst_peak_memory_bytes(const RunConfig& c) const {
  const double m = static_cast<double>(c.micro_batch());
  double per_sample = static_cast<double>(per_sample_bytes);
  if (is_reduced(c.train.precision)) per_sample *= bf16_memory;
  if (c.train.recompute_segments > 0) per_sample *= 0.35;  // segment boundaries only
  const double variable = per_sample * m * (1.0 + memory_superlinear * m / 1024.0);
  return fixed_bytes + static_cast<int64_t>(std::ceil(variable * (1.0 + memory_noise)));
}

double SimulatedProfile::true_samples_per_s(const RunConfig& c) const {
  if (worst_peak_memory_bytes(c) > limit_bytes) return 0.0;
  double sps = sps_without_data(*this, c);
  // The input pipeline: on the training thread its time adds to the step; with workers it
  // overlaps and only the part the workers cannot keep up with shows.
  const double data_s = data_us_per_sample * 1e-6;
  if (data_s > 0) {
    const double compute_s = 1.0 / sps;
    const int w = std::min(c.workers, cores);
    sps = 1.0 / (w == 0 ? compute_s + data_s : std::max(compute_s, data_s / w) * 1.02);
  }
  return sps;
}

double sps_without_data(const SimulatedProfile& p, const RunConfig& c) {
  const double m = static_cast<double>(c.micro_batch());
  double sps = p.peak_samples_per_s * m / (m + p.half_batch);
  if (p.cliff_batch > 0 && m > static_cast<double>(p.cliff_batch)) {
    sps *= std::max(0.2, 1.0 - p.cliff_loss_per_doubling *
                                   std::log2(m / static_cast<double>(p.cliff_batch)));
  }
  if (is_reduced(c.train.precision)) sps *= p.bf16_speedup;
  if (c.train.accumulate > 1) sps *= 0.98;           // one optimizer step per K micro-batches
  if (c.train.recompute_segments > 0) sps *= 0.75;  // the forward runs twice
  return sps;
}

SimulatedDevice::SimulatedDevice(SimulatedProfile profile, uint64_t seed)
    : profile_(profile), rng_(seed) {}

TrialOutcome SimulatedDevice::run(const TrialRequest& request) {
  SATURATE_CHECK(request.steps > 0, "tune: a trial needs at least one step");
  const RunConfig& c = request.config;
  TrialOutcome out;
  std::uniform_real_distribution<double> mem_jitter(-1.0, 1.0);
  std::normal_distribution<double> step_jitter(0.0, profile_.step_noise);
  const int64_t worst = profile_.worst_peak_memory_bytes(c);
  const double variable = static_cast<double>(worst - profile_.fixed_bytes) / (1.0 + profile_.memory_noise);
  const double sps = profile_.true_samples_per_s(c);
  double samples = 0, seconds = 0;
  std::vector<double> timed;
  for (int64_t i = 0; i < request.steps; ++i) {
    ++out.steps_run;
    const int64_t peak = profile_.fixed_bytes +
        static_cast<int64_t>(variable * (1.0 + profile_.memory_noise * mem_jitter(rng_)));
    if (peak > profile_.limit_bytes) return out;  // out of memory in this step
    out.measurement.peak_memory_bytes = std::max(out.measurement.peak_memory_bytes, peak);
    if (i < request.warmup_steps) continue;
    const double slowdown = i == 0 ? profile_.first_step_slowdown : 1.0;
    const double step_sps = std::max(1e-6, sps * (1.0 + step_jitter(rng_)) / slowdown);
    timed.push_back(step_sps);
    samples += static_cast<double>(c.train.batch_size);
    seconds += static_cast<double>(c.train.batch_size) / step_sps;
  }
  out.fits = true;
  Measurement& m = out.measurement;
  m.step_samples_per_s = timed;
  if (seconds > 0) {
    m.samples_per_s = samples / seconds;
    PhaseBreakdown& ph = m.phases;
    ph.step_ms = 1000.0 * seconds / static_cast<double>(timed.size());
    // Data wait: the part of the input pipeline's time that compute does not hide.
    const double batch = static_cast<double>(c.train.batch_size);
    const double data_ms = profile_.data_us_per_sample * 1e-3 * batch;
    const double compute_ms =
        1000.0 * batch * (1.0 / sps_without_data(profile_, c));
    const int w = std::min(c.workers, profile_.cores);
    const double wait = w == 0 ? data_ms : std::max(0.0, data_ms / w - compute_ms);
    ph.data_wait_ms = std::min(ph.step_ms, wait);
    const double rest = ph.step_ms - ph.data_wait_ms;
    ph.forward_ms = rest / 3.0;
    ph.backward_ms = rest / 2.0;
    ph.optimizer_ms = rest - ph.forward_ms - ph.backward_ms;
    const auto [lo, hi] = std::minmax_element(timed.begin(), timed.end());
    m.spread = (*hi - *lo) / median(timed);
  }
  m.loss = 1.0;
  return out;
}

EvalTrial SimulatedDevice::evaluate(const RunConfig& config, int64_t eval_batch,
                                    int64_t batches) {
  EvalTrial t;
  t.measured = true;
  RunConfig c = config;
  c.train.batch_size = eval_batch;
  c.train.accumulate = 1;
  c.train.recompute_segments = 0;
  const int64_t activations = profile_.worst_peak_memory_bytes(c) - profile_.fixed_bytes;
  t.peak_memory_bytes = profile_.fixed_bytes + activations / 4;
  t.fits = t.peak_memory_bytes <= profile_.limit_bytes;
  if (!t.fits) return t;
  std::normal_distribution<double> jitter(0.0, profile_.step_noise);
  t.samples = eval_batch * batches;
  t.samples_per_s = 3.0 * sps_without_data(profile_, c) *
                    (1.0 + jitter(rng_) / std::sqrt(static_cast<double>(batches)));
  return t;
}

QualityRun SimulatedDevice::train_and_validate(const RunConfig& c, int64_t samples) {
  QualityRun q;
  if (profile_.worst_peak_memory_bytes(c) > profile_.limit_bytes) {
    q.fits = false;
    return q;
  }
  // Distance from the sweet spot in octaves of lr per sample (the linear-scaling rule for SGD
  // keeps it; for AdamW the square-root rule lands half-way, which this model tolerates).
  const double per_sample = c.train.lr / static_cast<double>(c.train.batch_size);
  const double octaves = std::fabs(std::log2(per_sample / profile_.best_lr_per_sample));
  const double tolerance = c.train.optimizer == OptimizerKind::kAdamW ? 2.0 : 1.0;
  const double excess = std::max(0.0, octaves - tolerance);
  q.samples = samples;
  q.peak_memory_bytes = profile_.worst_peak_memory_bytes(c);
  q.wall_s = static_cast<double>(samples) / std::max(1e-9, profile_.true_samples_per_s(c));
  // Seed-to-seed scatter: a fixed draw per seed, so a rerun of the same seed agrees.
  std::mt19937_64 seed_rng(c.train.seed * 0x9E3779B97F4A7C15ULL + 7);
  const double seed_jitter = std::normal_distribution<double>(0.0, profile_.metric_noise)(seed_rng);
  q.validation_metric = std::max(0.1, 0.92 - 0.04 * excess + seed_jitter -
                                          (is_reduced(c.train.precision) ? profile_.reduced_precision_penalty : 0.0));
  q.validation_loss = 0.3 + 0.1 * excess - seed_jitter;
  q.final_loss = 0.25 + 0.1 * excess;
  const int64_t steps = std::max<int64_t>(1, samples / c.train.batch_size);
  std::normal_distribution<double> jitter(0.0, 0.01);
  for (int64_t i = 0; i < steps; ++i) {
    const double progress = static_cast<double>(i + 1) / static_cast<double>(steps);
    q.losses.push_back(q.final_loss + 2.0 * std::exp(-4.0 * progress) + jitter(rng_));
  }
  return q;
}

}  // namespace saturate
