// SPDX-License-Identifier: Apache-2.0
#pragma once
// Trainer: runs the optimisation loop of one model on one device and reports each step to a
// TelemetrySink, then evaluates on the test split.
//
//   seed_everything(opts.seed);
//   auto model = make_model("fmnist-cnn", inputs);
//   Trainer trainer(*model, opts, c10::Device("cpu"));
//   TrainSummary s = trainer.fit(splits, &progress);

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "saturate/data/batch_source.h"
#include "saturate/data/dataset.h"
#include "saturate/telemetry/noise_scale.h"
#include "saturate/telemetry/step_record.h"
#include "saturate/train/adaptive_batch.h"
#include "saturate/train/checkpoint.h"
#include "saturate/train/oom_probe.h"
#include "saturate/train/train_options.h"

namespace saturate {

class DeviceMemory;
class GradientSync;
class Model;
class PhaseTimer;
class StagedStep;
class TelemetrySink;

/// A target that no loss counts (padding in token windows).
constexpr int64_t kIgnoreTarget = -1;

/// The training loss: mean cross-entropy in fp32 whatever the forward ran in, over the batch for
/// classifiers (logits [B, classes]) and over every target token but kIgnoreTarget for language
/// models (logits [B, T, vocab], targets [B, T]).
at::Tensor mean_loss(const at::Tensor& logits, const at::Tensor& targets);

/// One evaluation batch's sums: cross-entropy summed, correct predictions and the targets
/// counted (every token of a language model's windows but kIgnoreTarget; one per sample for a
/// classifier).
struct EvalSums {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t units = 0;
  bool per_token = false;
  /// Another batch's sums added (per_token taken from it).
  EvalSums& operator+=(const EvalSums& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    units += o.units;
    per_token = o.per_token;
    return *this;
  }
};
EvalSums eval_sums(const at::Tensor& logits, const at::Tensor& targets);

struct EvalResult {
  double accuracy = 0.0;  ///< fraction correct in [0, 1] (of target tokens for text)
  double loss = 0.0;      ///< mean cross-entropy (per target token for text)
  int64_t samples = 0;
  bool per_token = false;  ///< a language model's: accuracy and loss per target token
};

/// Why a run stopped as diverged, and what it looked like just before.
struct Divergence {
  int64_t step = -1;    ///< the step at which it was detected
  std::string reason;   ///< "the loss is nan", "20 fp16 steps in a row skipped ..."
  int64_t last_finite_step = -1;  ///< the last step with a finite loss (-1: none)
  double last_finite_loss = std::numeric_limits<double>::quiet_NaN();
  double loss_scale = 1.0;  ///< at `step` (1 without loss scaling)
  double lr = 0.0;          ///< at `step`
  /// The gradient norms of the steps up to `step` (at most 10, oldest first; -1 unknown).
  std::vector<double> grad_norms;
};

struct TrainSummary {
  int64_t steps = 0;            ///< optimizer steps taken
  int64_t samples = 0;          ///< training samples consumed
  double epochs = 0.0;          ///< samples / train size
  double samples_per_s = 0.0;   ///< steady state: warm-up steps excluded, evaluation excluded
  double train_wall_s = 0.0;    ///< wall time of the training loop (all steps)
  double final_loss = 0.0;      ///< mean training loss over the last final_loss_steps steps
  int64_t final_loss_steps = 0;  ///< min(50, the steps this process ran)
  double test_accuracy = std::numeric_limits<double>::quiet_NaN();  ///< NaN when not evaluated
  double test_loss = std::numeric_limits<double>::quiet_NaN();
  double val_accuracy = std::numeric_limits<double>::quiet_NaN();  ///< NaN without a validation split
  double val_loss = std::numeric_limits<double>::quiet_NaN();
  PhaseBreakdown phases;
  bool is_interrupted = false;  ///< stopped early through the stop flag
  int64_t peak_memory_bytes = 0;  ///< highest per-step peak (0 without a DeviceMemory)
  int64_t skipped_steps = 0;      ///< optimizer steps skipped for non-finite gradients (fp16)
  double loss_scale = 1.0;        ///< loss scale at the end (1 without loss scaling)
  int64_t resumed_from_step = -1; ///< the checkpoint's step when restore() preceded fit()
  std::optional<Divergence> divergence;  ///< set when the run stopped as diverged
  std::string last_checkpoint;    ///< the folder of the last checkpoint written (empty: none)
  /// TrainOptions::target_metric: whether it was reached, after how many steps and samples, in
  /// how much training time (the steps' summed time, evaluation left out), and the value seen.
  bool target_reached = false;
  int64_t target_steps = -1;
  int64_t target_samples = -1;
  double target_train_s = -1;
  double target_seen = std::numeric_limits<double>::quiet_NaN();
  /// The gradient noise scale over the run's last (up to 1000) measured steps, raw and (AdamW)
  /// preconditioned; steps == 0 when the run measured none (no accumulation, one rank, or
  /// TrainOptions::noise_scale off).
  NoiseScaleEstimate noise;
  NoiseScaleEstimate noise_precond;
  /// Steps whose noise scale was measured (TrainOptions::noise_scale_budget may thin them), and
  /// the share of the steps' wall time measuring took (host time).
  int64_t noise_measured_steps = 0;
  double noise_cost_share = 0;
  /// --adaptive-batch: each change of batch, in order (empty: it never grew).
  std::vector<BatchChange> batch_changes;
};

/// Training steps whose mean loss a "loss" target compares.
inline constexpr int64_t kTargetLossSteps = 20;

/// Throws saturate::Error naming the problem for a target metric that is not one of
/// val_accuracy, val_loss and loss.
void check_target_metric(const std::string& metric);

/// What a split model's step (a pipeline's stages, a tensor-parallel model's shares) cannot be
/// combined with yet in `options`, as the setting that asks for it; nullptr: nothing. One list
/// for Trainer::set_staged_step and for the command line, which refuses before ranks start.
const char* staged_step_conflict(const TrainOptions& options);

class Trainer {
 public:
  /// Moves the model to `device`, applies recompute segments and builds the optimizer. `model`
  /// (and `memory`, when given) must outlive the trainer. With `memory`, each step's peak
  /// memory is recorded and probe() is available.
  /// With `sync` (which must outlive the trainer too), every micro-batch's gradients go
  /// through it: data parallelism over several processes.
  Trainer(Model& model, TrainOptions options, c10::Device device, DeviceMemory* memory = nullptr,
          GradientSync* sync = nullptr);
  ~Trainer();

  /// Trains on `data.train` for options.steps (or epochs), then evaluates on `data.validation`
  /// (when not empty) and `data.test` when options.evaluate; with options.eval_every, the
  /// validation split (else the test split) is also evaluated every that many steps, as
  /// "val_accuracy"/"val_loss" (or "test_...") evaluations in the sink. Records go to `sink` (may be null). Stops after the current step when
  /// `stop` becomes true. LibTorch errors propagate unchanged; a model whose parameters or
  /// batch end up on another device fails with saturate::Error before the first step.
  TrainSummary fit(const DatasetSplits& data, TelemetrySink* sink = nullptr,
                   const std::atomic<bool>* stop = nullptr);
  /// The same, with training batches from `source` (a loader, a test double). `data` still
  /// gives the test split and the training-set size that epochs are counted in; the number of
  /// steps comes from options().steps or epochs × source.batches_per_epoch().
  TrainSummary fit(BatchSource& source, const DatasetSplits& data, TelemetrySink* sink = nullptr,
                   const std::atomic<bool>* stop = nullptr);

  /// Accuracy and loss over `data` in eval mode under c10::InferenceMode, in batches of
  /// options.eval_batch_size; restores the train/eval mode.
  EvalResult evaluate(const TensorDataset& data, double normalize_mean, double normalize_std);

  /// Runs one full training step (forward, backward, optimizer) on `batch_size` samples of
  /// `data.train` and reports whether it fit in memory and its peak. The model, optimizer and
  /// loss-scaler state are put back afterwards, fit or not, and cached memory is released, so
  /// any number of probes leave the process as they found it. Needs a DeviceMemory.
  ProbeResult probe(int64_t batch_size, const DatasetSplits& data);

  /// The run's state at its current step boundary: after fit(), where it ended; inside a
  /// CheckpointHook::save(), where it is.
  TrainState capture() const;
  /// Puts `state` (from capture(), possibly another process's) back: the model's tensors, the
  /// optimizer, the loss scaler and the generators now, the position and records for the next
  /// fit(), which then continues at state.step instead of 0. Throws saturate::Error when the
  /// state's tensors do not match this model's.
  void restore(const TrainState& state);
  /// Checkpoints during fit(): asked at every step boundary, written once the steps in flight
  /// are read (a state with a non-finite loss, gradient or parameter is never written), also
  /// when `stop` ends the run (preemption) and when it completes. Under data parallel the ranks
  /// agree on it every 8 steps and rank 0 saves. `hook` must outlive fit(); null: none.
  void set_checkpoint_hook(CheckpointHook* hook) { hook_ = hook; }
  /// For a model split over processes (pipeline stages, tensor shares): `sum` adds a few
  /// numbers over every process of the job (a collective each calls at the same point), through
  /// which they agree every 8 steps on stopping, checkpoints and divergence, as data-parallel
  /// ranks do. Set before fit(); empty: none.
  void set_boundary_vote(std::function<void(std::vector<double>&)> sum) { vote_ = std::move(sum); }
  /// Pipeline parallelism (train/staged_step.h): the trainer's model is this process's stage,
  /// and every step's forward and backward and every evaluation batch go through `staged`,
  /// which must outlive fit(). Set before fit(); null: none. saturate::Error for what a staged
  /// step cannot do yet: data parallel (a sync), accumulation, recomputation and --adaptive-batch,
  /// each named.
  void set_staged_step(StagedStep* staged);

  const TrainOptions& options() const { return options_; }
  const c10::Device& device() const { return device_; }

  /// Replaces the step timer (by default CUDA events on a CUDA device, a steady clock
  /// otherwise). fit() hands records to sinks once their times are readable, so on CUDA they
  /// arrive a step or two late and the stream never waits for timing.
  void set_phase_timer(std::unique_ptr<PhaseTimer> timer);
  const PhaseTimer& phase_timer() const { return *timer_; }

 private:
  struct State;
  class FitLoop;  // one fit(): the step loop and what it tracks between steps
  // fp16: the loss scaler's count of non-finite gradients summed over the stages and tensor
  // shares this process's model is split with, so that all skip alike.
  void agree_on_found_inf();
  // One optimizer step on a batch already on the device: micro-batches under autocast, scaled
  // backward, (scaled) optimizer step. Marks forward/backward/optimizer on `timer` (may be
  // null), sets loss scale and the skipped flag, and returns the step's loss as a device
  // tensor (reading it would wait for the device).
  // After a forward ran out of memory at micro-batch `begin`: the collectives the other ranks
  // make in the rest of the step, with zero gradients.
  void stand_in_for_step(int64_t begin, int64_t batch, int64_t micro);
  at::Tensor last_grad_norm_;  // of the last train_step, read with its record
  // The gradient norms one step measures the noise scale from (noise_scale.h), left on the
  // device as each parameter's squared L2 norm: the host sums them when it reads the record, so
  // that measuring adds few small ops to a step. Parts: the small batch's gradient, the whole
  // step's (its global norm, squared on the host), and every few measured steps under AdamW
  // the same preconditioned.
  struct NoiseNorms {
    at::Tensor small, big_norm, small_precond, big_precond;  // undefined: not measured
    double small_scale = 1;  // the small batch's sum × this: (batch / micro-batch)² / fp16 scale²
    bool precond_identity = false;  // AdamW before its 5th step: the raw norms stand in
    double b_small = 0, b_big = 0;
  };
  struct NoiseProbe {
    bool on = false;
    const std::vector<at::Tensor>* precond = nullptr;  // Adam's 1/(sqrt(v̂) + eps); null: none
    NoiseNorms norms;
    double spent_us = 0;  // host time measuring took in this step
  };
  NoiseProbe begin_noise_probe(int64_t batch, int64_t micro, int world);
  void measure_first_micro_batch(NoiseProbe& noise, int64_t batch, int64_t end);
  void measure_whole_step(NoiseProbe& noise, int64_t batch, int64_t micro, int world);
  NoiseNorms finish_noise_probe(NoiseProbe& noise, const at::Tensor& grad_norm,
                                double scale_used);
  // Adam's preconditioner, kept for a few of the steps that use it: the second moments move
  // slowly (β2 near 1), and φ does not change when the preconditioner is scaled.
  std::vector<at::Tensor> precond_;
  int64_t precond_uses_ = 0;
  NoiseNorms last_noise_;  // of the last train_step, read with its record
  // TrainOptions::noise_scale_budget: the credit (µs) the steps' time earns and measuring spends,
  // and the totals the summary reports.
  bool noise_due(int world);
  std::optional<int64_t> last_step_start_ns_;
  double noise_credit_us_ = 0;
  double noise_spent_us_ = 0, noise_steps_us_ = 0;
  int64_t noise_measured_ = 0;
  bool noise_forced_ = false;  // --adaptive-batch split this step in two to measure it
  static constexpr int64_t kPrecondEvery = 4;  // AdamW's preconditioned norms: every 4th measured step
  static constexpr int64_t kPrecondReuse = 4;  // the same preconditioner for 4 of those
  int64_t noise_steps_ = 0;
  // Micro-batches of the next train_step when set (> 0): --adaptive-batch's grown steps.
  int64_t step_accumulate_ = 0;
  at::Tensor train_step(const at::Tensor& x, const at::Tensor& y, StepRecord& r,
                        PhaseTimer* timer);
  // train_step through staged_: the pipeline runs the micro-batches, the norm is all stages'.
  at::Tensor staged_train_step(const at::Tensor& x, const at::Tensor& y, StepRecord& r,
                               PhaseTimer* timer);

  // The batch in options().memory_format (a copy for channels-last, which needs 4-D batches).
  at::Tensor layout(const at::Tensor& x) const;

  Model& model_;
  TrainOptions options_;
  c10::Device device_;
  DeviceMemory* memory_;
  GradientSync* sync_;
  std::unique_ptr<State> state_;
  std::unique_ptr<PhaseTimer> timer_;
  CheckpointHook* hook_ = nullptr;
  std::function<void(std::vector<double>&)> vote_;  // set_boundary_vote
  std::vector<bool> tp_share_;  // by parameter, of a model split by tensor: held as a share
  StagedStep* staged_ = nullptr;
};

/// Steady-state samples/s of `records`: samples over step time after the first `warmup_steps`
/// (all records when there are no more than that).
double steady_samples_per_s(const std::vector<StepRecord>& records, int64_t warmup_steps);

}  // namespace saturate
