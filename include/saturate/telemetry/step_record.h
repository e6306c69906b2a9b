// SPDX-License-Identifier: Apache-2.0
#pragma once
// StepRecord: what one training step did and where its time went. Plain data with no LibTorch
// types, so everything downstream (sinks, diagnosis, tuner, reports) is testable anywhere.
//
//   StepRecord r; r.step = 12; r.samples = 64; r.forward_ms = 3.1; ... sink.on_step(r);

#include <cstdint>
#include <limits>
#include <vector>

namespace saturate {

/// One stretch of a step spent in one phase: `phase` indexes kPhaseNames, `start_ms` counts
/// from the step's start.
struct PhaseSpan {
  int phase = 0;
  double start_ms = 0.0, ms = 0.0;
};

/// The names of the phases PhaseSpan::phase indexes, in the step's order.
inline constexpr const char* kPhaseNames[] = {"data_wait", "host_to_device", "forward",
                                              "backward",  "optimizer",      "communication"};

/// Exclusive phases of a step: together they account for the step's wall time.
struct StepRecord {
  int64_t step = 0;     ///< 0-based optimizer step index within the run.
  int64_t epoch = 0;    ///< 0-based epoch the step's data came from.
  int64_t samples = 0;  ///< samples consumed by this step (all micro-batches).
  int64_t tokens = 0;   ///< tokens of those samples (text: samples × window); 0 for images.
  double start_ms = 0.0;  ///< when the step began, host clock, ms since the run began.
  double data_wait_ms = 0.0;       ///< waiting for the next batch from the input pipeline.
  double host_to_device_ms = 0.0;  ///< copying the batch to the device.
  double forward_ms = 0.0;         ///< forward pass and loss.
  double backward_ms = 0.0;        ///< backward pass.
  double optimizer_ms = 0.0;       ///< unscale/clip/optimizer step/zero_grad.
  double communication_ms = 0.0;   ///< gradient all-reduce (data-parallel runs).
  double other_ms = 0.0;           ///< the rest of the step's wall time.
  double step_ms = 0.0;            ///< wall time of the whole step; the phases sum to it.
  double loss = 0.0;               ///< training loss of the step (mean over its samples).
  double loss_scale = 1.0;         ///< dynamic loss scale in effect (1 without scaling).
  double lr = 0.0;                 ///< learning rate used by the optimizer step.
  bool is_skipped = false;         ///< optimizer step skipped (non-finite gradients).
  /// Global L2 norm of the step's gradients (unscaled, averaged across ranks), before any
  /// clipping; -1 when unknown.
  double grad_norm = -1.0;
  int64_t peak_memory_bytes = 0;      ///< peak device memory during the step, 0 when unknown.
  /// Minor page faults of the process while the host ran the step (all threads; -1 unknown):
  /// fresh memory being touched, which a caching allocator avoids after the first steps.
  int64_t page_faults = -1;
  /// Gradient noise scale (telemetry/noise_scale.h), for a step that measured it: this step's
  /// unbiased estimates of |G|² and tr(Σ), and φ smoothed over the run so far. The _precond
  /// values measure AdamW's preconditioned gradients, every 4th step (the raw ones before its
  /// 5th step). NaN when not measured.
  double noise_grad_sqr = std::numeric_limits<double>::quiet_NaN();
  double noise_trace = std::numeric_limits<double>::quiet_NaN();
  double gns = std::numeric_limits<double>::quiet_NaN();
  double noise_grad_sqr_precond = std::numeric_limits<double>::quiet_NaN();
  double noise_trace_precond = std::numeric_limits<double>::quiet_NaN();
  double gns_precond = std::numeric_limits<double>::quiet_NaN();
  /// The batch sizes the measuring pair averaged (0: not measured).
  double gns_b_small = 0, gns_b_big = 0;
  /// The phases in the order they ran, when they interleaved (micro-batches, a pipeline
  /// stage's schedule) and a host clock timed them; empty otherwise. For the trace.
  std::vector<PhaseSpan> spans;
};

/// Sum of the phase fields, for checks that they account for step_ms.
double phase_sum_ms(const StepRecord& r);

/// Mean milliseconds per step of each phase over a run's steady steps: the one breakdown type
/// that train summaries, tuner measurements and plans ("phases_ms") share.
struct PhaseBreakdown {
  double data_wait_ms = 0, host_to_device_ms = 0, forward_ms = 0, backward_ms = 0,
         optimizer_ms = 0, communication_ms = 0, other_ms = 0, step_ms = 0;
};

/// The mean phases of records[first..]; all records when `first` would leave none.
PhaseBreakdown mean_phases(const std::vector<StepRecord>& records, size_t first);

/// Mean page_faults of records[first..] that counted them; -1 when none did.
double mean_page_faults(const std::vector<StepRecord>& records, size_t first);

}  // namespace saturate
