// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a train run's steps go: the progress bar, --logdir (TensorBoard, steps.jsonl with a
// context line first) and --trace files, and with --logdir device readings (CPU, RSS, GPUs
// through NVML) beside the steps. Opened once the run is known to go ahead; a resumed run
// appends to the logs of its earlier part.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "command.h"
#include "saturate/telemetry/console_progress.h"
#include "saturate/telemetry/device_sampler.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/train/train_options.h"
#include "saturate/train/trainer.h"

namespace saturate::cli {

struct RunSinks {
  RunSinks(bool quiet, const std::string& logdir, const std::string& trace,
           double sample_interval_ms, const DistEnv& dist, int64_t resume_step);
  /// Writes steps.jsonl's {"type":"context",...} line (with --logdir): the machine, the
  /// software and the run's model, data and main settings, for the report's Context table.
  void describe_run(nlohmann::json context, const std::string& model, const std::string& data,
                    const TrainOptions& o);
  /// With a --target: steps.jsonl's {"type":"target",...} line (the summary's "target": reached
  /// or not, after how many steps, samples and seconds of training) and, when reached, TensorBoard's
  /// eval/target_samples and eval/target_train_s at that step. The report's headline leads with it.
  void record_target(const TrainOptions& o, const TrainSummary& s);
  /// A diverged run: its diagnosis as a "divergence" line of steps.jsonl (the report shows it).
  void record_divergence(const TrainSummary& s);
  TelemetrySink* sink() { return sampled ? static_cast<TelemetrySink*>(&*sampled) : &all; }
  void finish(DistGroup* group);

  ConsoleProgress progress;
  MultiSink all;
  std::optional<FileSinks> files;
  std::optional<DeviceSampler> sampler;
  std::optional<SampledSink> sampled;
};

}  // namespace saturate::cli
