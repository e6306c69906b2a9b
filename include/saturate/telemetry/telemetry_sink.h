// SPDX-License-Identifier: Apache-2.0
#pragma once
// TelemetrySink: where step records and run events go. The library never prints; a caller picks
// sinks (console progress, files, memory in tests) and fans out with MultiSink.
//
//   ConsoleProgress bar(std::cerr, total_steps);
//   trainer.fit(data, &bar);

#include <memory>
#include <string>
#include <vector>

#include "saturate/telemetry/device_sample.h"
#include "saturate/telemetry/step_record.h"

namespace saturate {

/// Receives records in step order from the training thread. Implementations must not throw
/// from on_step for I/O trouble they can report later (the run matters more than its log).
class TelemetrySink {
 public:
  virtual ~TelemetrySink() = default;
  /// A run is starting; `total_steps` is 0 when unknown.
  virtual void on_begin(int64_t total_steps) {}
  virtual void on_step(const StepRecord& record) = 0;
  /// An evaluation finished: metric name ("test_accuracy", "test_loss") and value.
  virtual void on_eval(int64_t step, const std::string& metric, double value) {}
  /// A device sampler reading, delivered on the training thread (see SampledSink) after the
  /// step records that preceded it; `step` is the newest step recorded by then (-1 before any).
  virtual void on_device_sample(int64_t step, const DeviceSample& sample) {}
  /// A checkpoint of the run after `steps_done` steps is about to be written: make what is
  /// buffered durable, so that a run resumed from it after a crash keeps the earlier steps' log.
  virtual void on_checkpoint(int64_t steps_done) {}
  /// The run's batch changes before step `step` (--adaptive-batch): `batch` per rank from then
  /// on, at `lr_multiplier` × the starting learning rate, for the reason `why`.
  virtual void on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                               const std::string& why) {}
  /// The run ended (normally or interrupted); flush what is buffered.
  virtual void on_end() {}
};

/// Forwards every call to each sink it holds, in order. Does not own them.
class MultiSink : public TelemetrySink {
 public:
  void add(TelemetrySink* sink);
  void on_begin(int64_t total_steps) override;
  void on_step(const StepRecord& record) override;
  void on_eval(int64_t step, const std::string& metric, double value) override;
  void on_device_sample(int64_t step, const DeviceSample& sample) override;
  void on_checkpoint(int64_t steps_done) override;
  void on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                       const std::string& why) override;
  void on_end() override;

 private:
  std::vector<TelemetrySink*> sinks_;
};

/// Keeps every record in memory (tests, the tuner, throughput summaries).
class MemorySink : public TelemetrySink {
 public:
  void on_step(const StepRecord& record) override { records_.push_back(record); }
  const std::vector<StepRecord>& records() const { return records_; }

 private:
  std::vector<StepRecord> records_;
};

}  // namespace saturate
