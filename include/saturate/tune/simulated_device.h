// SPDX-License-Identifier: Apache-2.0
#pragma once
// SimulatedDevice: an analytic accelerator for testing and benchmarking search strategies in
// microseconds. Peak memory is fixed + per-sample × micro-batch (with bounded noise and an
// optional super-linear term); throughput saturates with the batch and can fall past a cliff
// (cache or memory-bandwidth effects, as CPUs show at large batches); a step past the memory
// limit is out of memory; every timed step carries multiplicative noise. Seeded: the same
// profile and seed give the same answers.
//
//   SimulatedDevice dev(SimulatedProfile::random(17), /*seed=*/1);
//   TrialOutcome t = dev.run({config, 3});

#include <cstdint>
#include <random>
#include <string>

#include "saturate/tune/trial.h"

namespace saturate {

struct SimulatedProfile {
  int64_t limit_bytes = 16LL << 30;
  int64_t fixed_bytes = 1LL << 30;      ///< weights, optimizer state, workspaces
  int64_t per_sample_bytes = 8LL << 20;  ///< activations per sample (fp32)
  double memory_superlinear = 0.0;  ///< extra bytes ∝ B²: per_sample × B × (1 + this × B / 1024)
  double memory_noise = 0.01;       ///< peaks vary uniformly within ± this share of the variable part
  double peak_samples_per_s = 10000;  ///< plateau of the throughput curve (fp32)
  double half_batch = 16;             ///< batch at which throughput is half the plateau
  int64_t cliff_batch = 0;            ///< past it throughput falls; 0 = no cliff
  double cliff_loss_per_doubling = 0.2;  ///< share of throughput lost per doubling past the cliff
  double step_noise = 0.03;              ///< relative standard deviation of one step's samples/s
  double bf16_speedup = 1.0;  ///< throughput factor under bf16/fp16
  double bf16_memory = 0.6;   ///< activation-memory factor under bf16/fp16
  int64_t dataset_size = 1 << 20;
  double data_us_per_sample = 0;  ///< one core's time to produce a sample (decode, augment)
  int cores = 8;                   ///< input-pipeline workers beyond this add nothing
  double best_lr_per_sample = 3e-3 / 64;  ///< lr / batch at which the synthetic quality peaks
  double reduced_precision_penalty = 0.0;  ///< accuracy lost under bf16/fp16 (a fragile model)
  double metric_noise = 0.003;  ///< seed-to-seed scatter (sd) of the validation metric
  /// The first step of every trial takes this many times longer (allocations, kernel and
  /// primitive selection, first-touch page faults): a one-step timing is not a measurement.
  double first_step_slowdown = 1.0;

  /// A random but plausible device/model pair: the largest batch that fits spans 4…20000,
  /// about 40% of profiles have a throughput cliff below it, and one step's samples/s scatters
  /// by 0.5%…`max_step_noise` (steady GPU steps: 1-3%; a shared CPU: up to 8% and more).
  static SimulatedProfile random(uint64_t seed, double max_step_noise = 0.03);
  std::string describe() const;

  /// Worst-case peak bytes of one step (noise at its maximum).
  int64_t worst_peak_memory_bytes(const RunConfig& c) const;
  /// Noise-free samples/s of a configuration (0 when it does not fit).
  double true_samples_per_s(const RunConfig& c) const;
};

/// Samples/s of the model's steps alone, as if data were free.
double sps_without_data(const SimulatedProfile& p, const RunConfig& c);

class SimulatedDevice : public TrialRunner {
 public:
  SimulatedDevice(SimulatedProfile profile, uint64_t seed);
  TrialOutcome run(const TrialRequest& request) override;
  /// A synthetic learning curve: the validation metric drops when the learning rate per sample
  /// strays from the profile's sweet spot (lr / effective batch), as an unscaled batch change does.
  /// The metric scatters by metric_noise between seeds (the same seed gives the same value);
  /// a configuration past the memory limit returns fits == false.
  QualityRun train_and_validate(const RunConfig& config, int64_t samples) override;
  /// Evaluation keeps a quarter of a training step's activations and runs three times as fast
  /// per sample as training at the same batch (no backward, no optimizer), with step noise.
  EvalTrial evaluate(const RunConfig& config, int64_t eval_batch, int64_t batches) override;
  int64_t memory_limit_bytes() const override { return profile_.limit_bytes; }
  int64_t max_batch_size() const override { return profile_.dataset_size; }
  const SimulatedProfile& profile() const { return profile_; }

 private:
  SimulatedProfile profile_;
  std::mt19937_64 rng_;
};

}  // namespace saturate
