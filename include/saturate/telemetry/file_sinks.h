// SPDX-License-Identifier: Apache-2.0
#pragma once
// File sinks: JSON Lines (one object per step and per evaluation, for scripts) and a
// Chrome/Perfetto trace (one slice per phase per step; open it in ui.perfetto.dev or
// chrome://tracing).
//
//   JsonlSink jsonl("run/steps.jsonl");
//   TraceSink trace("run/trace.json");

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "saturate/telemetry/telemetry_sink.h"

namespace saturate {

/// {"type":"step","step":..,"epoch":..,"samples":..,"step_ms":..,"data_wait_ms":.., ...,"loss":..},
/// {"type":"eval","step":..,"metric":"test_accuracy","value":..} and one "device_sample" object
/// per sampler reading, one per line, flushed at
/// each evaluation and at the end. The file is created (truncated) by the constructor, which
/// throws saturate::Error naming it when it cannot be written. With `resume_step` >= 0 (a run
/// resumed from a checkpoint at that step) the file's lines of earlier steps are kept and the
/// rest, the steps the resumed run redoes, dropped.
class JsonlSink : public TelemetrySink {
 public:
  explicit JsonlSink(const std::string& path, int64_t resume_step = -1);
  ~JsonlSink() override;
  void on_step(const StepRecord& r) override;
  void on_eval(int64_t step, const std::string& metric, double value) override;
  void on_device_sample(int64_t step, const DeviceSample& sample) override;
  void on_checkpoint(int64_t steps_done) override;
  /// {"type":"batch_change","step":..,"batch_size":..,"lr_multiplier":..,"why":..}
  void on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                       const std::string& why) override;
  void on_end() override;

  /// One line of `record` (an object with a "type"), flushed: e.g. the run's context.
  void write_record(const nlohmann::json& record);
  /// The line written for a record (no newline).
  static std::string step_line(const StepRecord& r);
  /// {"type":"device_sample","step":..,"t_s":..,"cpu":{..},"gpus":[..]}; GPU fields the driver
  /// did not report are null.
  static std::string sample_line(int64_t step, const DeviceSample& s);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

/// Collects one slice per phase per step (laid out in phase order inside a "step N" slice that
/// starts at the record's start_ms) and writes {"traceEvents":[...],"displayTimeUnit":"ms"} at
/// on_end(). Throws saturate::Error naming the file when it cannot be created. A data-parallel
/// rank collects its own track (process `track`, named "rank N") with no file; rank 0 writes
/// every rank's document as one trace with merge_traces().
class TraceSink : public TelemetrySink {
 public:
  /// `path` empty: collect only (json() gives the document). With `resume_step` >= 0 (a run
  /// resumed at that step) the file's earlier steps are kept and the new ones follow them on
  /// the timeline; a file that cannot be read as a trace is started afresh, said on the log.
  explicit TraceSink(const std::string& path, int track = 0, std::string track_name = "",
                     int64_t resume_step = -1);
  ~TraceSink() override;
  void on_step(const StepRecord& r) override;
  /// An instant event "batch → N" where the next step starts.
  void on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                       const std::string& why) override;
  void on_end() override;
  /// The document on_end() writes.
  std::string json() const;

 private:
  int track_ = 0;
  std::string track_name_;
  struct Slice {
    std::string name;
    double ts_us, dur_us;
    int64_t step;
  };
  std::string path_;
  double timeline_end_us_ = 0.0;  // end of the last step's slice
  std::vector<Slice> slices_;
  struct Instant {
    std::string name, why;
    double ts_us;
    int64_t step;
  };
  std::vector<Instant> instants_;
  // A resumed run's earlier events (steps before the resume), and where they end.
  std::unique_ptr<nlohmann::json> kept_;
  double offset_us_ = 0.0;
  // The file is rewritten (atomically) every kFlushS seconds of steps, so that a killed run
  // leaves its trace up to then, and at the end.
  double last_flush_ms_ = 0.0;
  void write_file() const;
};

/// One trace of several TraceSink::json() documents (each its own process track, in order).
/// Throws saturate::Error when one is not a trace document.
std::string merge_traces(const std::vector<std::string>& documents);
/// Writes `document` to `path`; throws saturate::Error naming it when that fails.
void write_trace(const std::string& path, const std::string& document);

}  // namespace saturate
