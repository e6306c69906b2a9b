// SPDX-License-Identifier: Apache-2.0
#pragma once
// File sinks: JSON Lines (one object per step and per evaluation, for scripts) and a
// Chrome/Perfetto trace (one slice per phase per step; open it in ui.perfetto.dev or
// chrome://tracing).
//
//   JsonlSink jsonl("run/steps.jsonl");
//   TraceSink trace("run/trace.json");

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "saturate/telemetry/telemetry_sink.h"

namespace saturate {

/// {"type":"step","step":..,"epoch":..,"samples":..,"step_ms":..,"data_wait_ms":.., ...,"loss":..}
/// and {"type":"eval","step":..,"metric":"test_accuracy","value":..}, one per line, flushed at
/// each evaluation and at the end. The file is created (truncated) by the constructor, which
/// throws saturate::Error naming it when it cannot be written.
class JsonlSink : public TelemetrySink {
 public:
  explicit JsonlSink(const std::string& path);
  ~JsonlSink() override;
  void on_step(const StepRecord& r) override;
  void on_eval(int64_t step, const std::string& metric, double value) override;
  void on_end() override;

  /// The line written for a record (no newline).
  static std::string step_line(const StepRecord& r);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

/// Collects one slice per phase per step (laid out in phase order inside a "step N" slice,
/// ending when on_step is called) and writes {"traceEvents":[...],"displayTimeUnit":"ms"} at
/// on_end(). Throws saturate::Error naming the file when it cannot be created.
class TraceSink : public TelemetrySink {
 public:
  explicit TraceSink(const std::string& path);
  void on_step(const StepRecord& r) override;
  void on_end() override;
  /// The document on_end() writes (exposed for tests).
  std::string json() const;

 private:
  struct Slice {
    std::string name;
    double ts_us, dur_us;
    int64_t step;
  };
  std::string path_;
  std::chrono::steady_clock::time_point origin_;
  std::vector<Slice> slices_;
};

}  // namespace saturate
