// SPDX-License-Identifier: Apache-2.0
#pragma once
// TrialRunner: the seam between the tuner's decisions and the steps that inform them. A trial
// runs K training steps of one configuration and returns a Measurement, or OutOfMemory as a
// value. The real runner trains in-process with LibTorch (state restored after each trial); the
// SimulatedDevice answers from an analytic model for property tests and strategy benchmarks.
//
//   TrialOutcome t = runner.run({config, /*steps=*/3});
//   if (t.fits) use(t.measurement.samples_per_s, t.measurement.peak_memory_bytes);

#include <cstdint>
#include <string>
#include <vector>

#include "saturate/telemetry/noise_scale.h"
#include "saturate/telemetry/step_record.h"
#include "saturate/train/train_options.h"

namespace saturate {

/// What a trial varies. `train.batch_size` is the samples per optimizer step (split into
/// `train.accumulate` micro-batches); the rest of `train` (optimizer, lr, seed) rides along.
struct RunConfig {
  TrainOptions train;
  int threads = 0;  ///< intra-op threads; 0 leaves the runner's setting
  int workers = 0;   ///< input-pipeline worker threads (0: batches made on the training thread)
  int prefetch = 2;  ///< batches the input pipeline makes ahead
  /// Processes (ranks) the job runs as: data-parallel replicas × pipeline stages (or tensor
  /// shares).
  /// train.batch_size is each replica's, so the global batch is replicas() × batch_size.
  int world_size = 1;
  /// Pipeline parallel (`train --pipeline-stages`): the model split by layers over this many
  /// processes of each replica, each step as `micro_batches` micro-batches (0: train's default)
  /// under `pipeline_schedule` ("gpipe" | "1f1b"). 1: no pipeline.
  int pipeline_stages = 1;
  int64_t micro_batches = 0;
  std::string pipeline_schedule = "1f1b";
  /// Where the stages are cut (`train --pipeline-split`): "balanced" (profiled when train
  /// starts), "even", or each stage's layer count ("1,2,2"), which a tune records from the run
  /// it measured so that train --config cuts where the trial did.
  std::string pipeline_split = "balanced";
  /// Tensor parallel (`train --tensor-parallel`): the GPT's heads and MLP columns split over
  /// this many processes of each replica, every one taking the whole batch. 1: none. With
  /// pipeline stages each stage is split so (stages × tensor_parallel ranks a replica).
  int tensor_parallel = 1;

  /// Processes that hold one copy of the model between them.
  int ranks_per_replica() const {
    return (pipeline_stages > 1 ? pipeline_stages : 1) * (tensor_parallel > 1 ? tensor_parallel : 1);
  }
  /// Data-parallel replicas of the model: world_size / ranks_per_replica().
  int replicas() const { return world_size / ranks_per_replica(); }

  /// Micro-batch size: the samples one forward/backward holds in memory at once.
  int64_t micro_batch() const {
    return (train.batch_size + train.accumulate - 1) / train.accumulate;
  }
  /// Samples one optimizer step takes over all ranks.
  int64_t global_batch() const { return train.batch_size * (replicas() > 1 ? replicas() : 1); }
  /// "batch 256, bf16, accumulate 2, 4 threads": for logs and plans.
  std::string describe() const;
};

struct TrialRequest {
  RunConfig config;
  int64_t steps = 3;  ///< training steps to run; the first `warmup_steps` are not timed
  int64_t warmup_steps = 1;
};

/// Measurements shorter than this many seconds of timed steps are taken again, longer: a few
/// steps of a millisecond or two are the scheduler's noise, not the step's speed (mlp at batch
/// 128 on 2 cores: 5 timed steps read 51–82k samples/s where 400 steps read 75–85k).
inline constexpr double kMinTimedSeconds = 0.2;

/// The steps a measurement of `batch` at `samples_per_s` needs so that its timed steps (all but
/// one) last `min_timed_s`, at most `max_steps`; 0 when `timed_steps` already did (or there
/// was no rate to go by).
int64_t steps_for_timed(double min_timed_s, double samples_per_s, int64_t batch,
                        int64_t timed_steps, int64_t max_steps = 400);

/// What K steps of a configuration did.
struct Measurement {
  double samples_per_s = 0.0;  ///< over the timed steps (0 when none was timed)
  double spread = 0.0;         ///< relative spread of the timed steps' samples/s: (max-min)/median
  std::vector<double> step_samples_per_s;  ///< one per timed step
  PhaseBreakdown phases;                   ///< mean per timed step
  int64_t peak_memory_bytes = 0;  ///< highest peak over all steps, warm-up included
  double loss = 0.0;              ///< mean training loss over the steps
  /// The gradient noise scale over the steps that measured it (steps == 0: none did), raw and
  /// AdamW-preconditioned.
  NoiseScaleEstimate noise, noise_precond;
};

struct TrialOutcome {
  bool fits = false;        ///< false: out of memory (the only failure returned as a value)
  Measurement measurement;  ///< meaningful when fits
  int64_t steps_run = 0;    ///< steps started (an OOM counts the step it failed in)
};

/// A short training run for the quality guard: `samples` training samples from the config's
/// seed, then the validation metric on the held-out split.
struct QualityRun {
  bool fits = true;                ///< false: it ran out of memory (a value, like a trial's)
  int64_t samples = 0;             ///< training samples seen
  double final_loss = 0;           ///< mean training loss over the last steps
  double validation_metric = 0;    ///< validation accuracy in [0, 1]; higher is better
  /// What validation_metric is: "val_accuracy" for the built-in runner ("-val_loss", the
  /// validation loss per token negated, for text); a program's own evaluation (negated when
  /// lower is better) or its loss curve for --exec.
  std::string metric = "val_accuracy";
  bool metric_is_share = true;     ///< a share in [0, 1], shown in percent and points
  double validation_loss = 0;      ///< mean validation cross-entropy
  double wall_s = 0;               ///< how long the run took, evaluation included
  int64_t peak_memory_bytes = 0;   ///< highest step peak (0 when unknown)
  std::vector<double> losses;      ///< training loss per step
};

/// Evaluation of a configuration's model at one evaluation batch size, under inference mode
/// and with the training state (weights, gradients, optimizer state) resident, as when `train`
/// evaluates: peak memory of the evaluation alone and its samples/s.
struct EvalTrial {
  bool measured = false;  ///< false: this runner cannot evaluate (the tuner skips the stage)
  bool fits = false;      ///< false: out of memory (a value, like a trial's)
  double samples_per_s = 0;
  int64_t peak_memory_bytes = 0;
  int64_t samples = 0;    ///< timed evaluation samples
};

/// Runs trials. Implementations leave no trace of a trial: model, optimizer, RNG and allocator
/// state are as before, whatever the outcome. Errors other than running out of memory throw.
class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  virtual TrialOutcome run(const TrialRequest& request) = 0;
  /// Trains a fresh copy of the model (the initial weights of the config's seed) on `samples`
  /// samples and validates it on the held-out split. Running out of memory is returned as
  /// `fits == false`, with everything freed, as for run().
  virtual QualityRun train_and_validate(const RunConfig& config, int64_t samples) = 0;
  /// Evaluates `batches` batches of `eval_batch` validation samples (at most the whole split)
  /// after one training step of `config`, the first batch untimed.
  virtual EvalTrial evaluate(const RunConfig& config, int64_t eval_batch, int64_t batches) {
    (void)config, (void)eval_batch, (void)batches;
    return {};
  }

  /// Seconds a run costs besides its steps (a program's start-up and evaluation when each
  /// trial is a fresh process); 0 for an in-process runner.
  virtual double run_overhead_s() const { return 0; }
  /// Whether a trial's Measurement carries the gradient noise scale of its steps (a runner that
  /// trains in-process with micro-batches does; a simulation or a foreign program does not).
  virtual bool measures_noise_scale() const { return false; }
  /// Memory available to training, in bytes (a --memory-limit, or the device's capacity).
  virtual int64_t memory_limit_bytes() const = 0;
  /// Upper bound for the batch size (the training set's size, or a cap).
  virtual int64_t max_batch_size() const = 0;
};

/// Counts what passes through, for reports of how much a search cost.
class CountingRunner : public TrialRunner {
 public:
  explicit CountingRunner(TrialRunner& inner) : inner_(inner) {}
  TrialOutcome run(const TrialRequest& request) override;
  QualityRun train_and_validate(const RunConfig& config, int64_t samples) override {
    return inner_.train_and_validate(config, samples);
  }
  EvalTrial evaluate(const RunConfig& config, int64_t eval_batch, int64_t batches) override {
    return inner_.evaluate(config, eval_batch, batches);
  }

  double run_overhead_s() const override { return inner_.run_overhead_s(); }
  int64_t memory_limit_bytes() const override { return inner_.memory_limit_bytes(); }
  int64_t max_batch_size() const override { return inner_.max_batch_size(); }
  int64_t trials() const { return trials_; }
  int64_t steps() const { return steps_; }
  int64_t out_of_memory() const { return ooms_; }

 private:
  TrialRunner& inner_;
  int64_t trials_ = 0, steps_ = 0, ooms_ = 0;
};

}  // namespace saturate
