// SPDX-License-Identifier: Apache-2.0
#pragma once
// The outputs of a training run: the summary JSON (`saturate train --summary-json`, which
// `saturate compare` reads as a train run) and the summary printed at its end.
//
//   TrainReport r;  r.summary = trainer.fit(loader, splits);  r.options = opts;  ...
//   write_train_table(std::cout, r);
//   write_json_file("summary.json", train_report_to_json(r));

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "saturate/data/loader.h"
#include "saturate/device/probe.h"
#include "saturate/telemetry/noise_scale_json.h"  // noise_scale_to_json, for the summaries
#include "saturate/train/train_options.h"
#include "saturate/train/trainer.h"

namespace saturate {

/// One pipeline stage of a run (train --pipeline-stages), as its rank measured it.
struct StageReport {
  int64_t first_layer = 0, last_layer = 0;  ///< of the model's chain, inclusive
  double predicted_ms = std::numeric_limits<double>::quiet_NaN();  ///< the split's profile
  double compute_ms = 0;        ///< forward and backward per step (steady-state means)
  double communication_ms = 0;  ///< sending, and waiting for a neighbour (the bubble)
  double step_ms = 0;
  int64_t peak_memory_bytes = 0;
};

/// A finished (or stopped) run and what it ran with.
struct TrainReport {
  TrainSummary summary;  ///< rank 0's under data parallel (every rank holds the same weights)
  TrainOptions options;
  std::string model;   ///< the model's name
  std::string data;    ///< the data spec
  std::string device;  ///< "cpu", "cuda:0", …
  DeviceProbe probe;   ///< for the context block
  int threads = 0;     ///< intra-op threads per process
  int world_size = 1;  ///< data-parallel ranks; each trained options.batch_size per step
  int workers = 0;
  int prefetch = 2;
  int64_t memory_limit_bytes = 0;  ///< 0: the device's own
  LoaderStats loader;              ///< this rank's
  int64_t val_samples = 0;         ///< held out for validation
  /// Text data: tokens per sample (the window length), for tokens/s and perplexity; 0: images.
  int64_t tokens_per_sample = 0;
  bool is_terminated = false;      ///< SIGTERM stopped it (interrupted is set too)
  /// Pipeline parallel: the stages (one per rank; world_size then counts replicas, 1), the
  /// micro-batches per step and the schedule. Empty `stages`: no pipeline.
  std::vector<StageReport> stages;
  int64_t micro_batches = 0;
  std::string pipeline_schedule;
  /// Tensor parallel: the ranks each replica's GPT is split over (1: none), and the parameters
  /// rank 0 holds of the whole model's.
  int tensor_parallel = 1;
  int64_t local_parameters = 0, whole_parameters = 0;
};

/// schema_version 1: configuration, loader, throughput (rank 0's and the job's), memory, loss
/// scaling, final loss, validation and test results (null when not evaluated), interruption,
/// resume and checkpoint, divergence (null when none), phases_ms and the context block.
nlohmann::json train_report_to_json(const TrainReport& report);

/// "230 (95%: 150–340), 180 steps of 16 vs 64 samples"; "not measured".
std::string describe_noise_scale(const NoiseScaleEstimate& estimate);

/// The divergence diagnosis as JSON (null when none); non-finite numbers are null.
nlohmann::json divergence_to_json(const std::optional<Divergence>& divergence);
/// A --target's outcome: {"metric","value","reached","steps","samples","train_s","seen"}, the
/// last four null when it was not reached. The summary's "target" and steps.jsonl's target line.
nlohmann::json target_to_json(const TrainOptions& options, const TrainSummary& summary);

/// "saturate train: MODEL on DATA, DEVICE, N threads" and one row per figure: steps, samples/s,
/// step time by phase, precision, memory, loss scale (fp16), train time, resume, checkpoint,
/// final loss, validation and test results.
void write_train_table(std::ostream& out, const TrainReport& report);

}  // namespace saturate
