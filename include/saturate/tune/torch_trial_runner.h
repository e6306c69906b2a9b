// SPDX-License-Identifier: Apache-2.0
#pragma once
// TorchTrialRunner: trials as real LibTorch training steps, in this process. Every trial builds
// the model afresh from the configuration's seed (so each starts from the same weights and no
// trial can leak optimizer state into the next), trains through the Loader with the trial's
// workers and prefetch (the input pipeline is part of what is measured), catches out-of-memory by type, then frees everything and
// hands cached memory back.
//
//   TrainingInput input = open_training_input(input_options, cuda_device);  // what train builds
//   auto memory = make_device_memory(device, limit);
//   TorchTrialRunner runner("fmnist-cnn", input, device, *memory);
//   TrialOutcome t = runner.run({config, 4});

#include <cstdint>
#include <functional>
#include <string>

#include <c10/core/Device.h>

#include "saturate/data/training_input.h"
#include "saturate/tune/trial.h"

namespace saturate {

class ConsoleProgress;
class DeviceMemory;
class DistGroup;
class MemorySink;
class TelemetrySink;
class Trainer;
struct ProbeResult;
struct TrainSummary;

class TorchTrialRunner : public TrialRunner {
 public:
  /// `input` and `memory` must outlive the runner; every trial builds its Loader from `input`
  /// (the pipeline `train` builds for the same flags), and quality runs validate on
  /// input.splits.validation (the test split when there is none). The search plans against
  /// the memory's own limit when it has one, else the host memory available at start.
  /// The largest batch is the training split's size, at most `max_batch`.
  TorchTrialRunner(std::string model_spec, const TrainingInput& input, c10::Device device,
                   DeviceMemory& memory, int64_t max_batch = int64_t{1} << 40);
  TrialOutcome run(const TrialRequest& request) override;
  QualityRun train_and_validate(const RunConfig& config, int64_t samples) override;
  EvalTrial evaluate(const RunConfig& config, int64_t eval_batch, int64_t batches) override;
  int64_t memory_limit_bytes() const override { return limit_bytes_; }
  /// Data parallel: every trial trains on this rank's shard with gradients averaged across
  /// `group` (as `train` under a launcher does), one rank's out-of-memory ends the trial on all
  /// (TrainOptions::agree_on_oom), and outcomes are agreed: a trial fits only where it fit on
  /// every rank, its peak is the largest rank's, its times and losses rank 0's. Every rank
  /// must then run the same trials in the same order (the tuner does, given the same outcomes
  /// and TuneOptions::elapsed_s). `group` must outlive the runner.
  /// Samples/s are then the job's (the ranks step together: world × each rank's), and the
  /// largest batch is one rank's shard of the training split.
  void set_data_parallel(DistGroup* group);
  int64_t max_batch_size() const override { return max_batch_; }
  bool measures_noise_scale() const override { return true; }
  /// Every run's step records and evaluations also go to `sink` (null: none); it must outlive
  /// the runner's runs. For logs and tests.
  void set_observer(TelemetrySink* sink) { observer_ = sink; }
  /// A live line for each run (what it measures, how far, ETA), labelled by the runner; null:
  /// none. It must outlive the runner's runs.
  void set_progress(ConsoleProgress* progress) { progress_ = progress; }

 private:
  // Trains a fresh model of `c` with options `o` through the input's Loader, then (the Loader
  // gone, the training state resident) runs `after_fit` on the trainer; out of memory in
  // either is the result's outcome, and everything is freed before it returns.
  ProbeResult fit_fresh(const RunConfig& c, const TrainOptions& o, MemorySink& sink,
                        TrainSummary* summary,
                        const std::function<void(Trainer&)>& after_fit = nullptr);

  std::string model_spec_;
  const TrainingInput& input_;
  DatasetSplits eval_;  // the evaluation splits a quality run sees: validation as its test
  c10::Device device_;
  DeviceMemory& memory_;
  int64_t limit_bytes_ = 0;
  int64_t max_batch_ = 0;
  DistGroup* group_ = nullptr;
  TelemetrySink* observer_ = nullptr;
  ConsoleProgress* progress_ = nullptr;
  std::string progress_label_;  ///< the current run's, set before fit_fresh
};

}  // namespace saturate
