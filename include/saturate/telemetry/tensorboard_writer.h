// SPDX-License-Identifier: Apache-2.0
#pragma once
// TensorBoardWriter: scalar summaries in TensorBoard's event-file format (TFRecord framing with
// masked CRC32C around hand-encoded Event/Summary protos), with no protobuf dependency.
// TensorBoardSink turns step records into scalars.
//
//   TensorBoardWriter tb("runs/tuned");      // runs/tuned/events.out.tfevents.<time>.<host>.saturate
//   tb.add_scalar("train/loss", 0.42, /*step=*/10);

#include <cstdint>
#include <cstdio>
#include <string>

#include "saturate/core/crc32c.h"
#include "saturate/telemetry/telemetry_sink.h"

namespace saturate {

class TensorBoardWriter {
 public:
  /// Creates `logdir` (one level) when missing and opens a new event file in it, writing the
  /// file_version record. Throws saturate::Error naming the folder when it cannot be written.
  explicit TensorBoardWriter(const std::string& logdir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// Appends one scalar. `wall_time_s` < 0 means now. I/O errors are remembered, not thrown
  /// (the run matters more than its log); see is_ok().
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time_s = -1);
  /// Marks a restart at `step` (Event.session_log = START): TensorBoard then drops the
  /// events of earlier files of this run at `step` and after, the steps a resumed run redoes.
  void add_session_start(int64_t step);
  void flush();
  bool is_ok() const { return ok_; }
  const std::string& path() const { return path_; }

  /// The bytes of one framed record holding an encoded Event (exposed for tests).
  static std::string frame_record(const std::string& payload);
  /// Encoded Event{wall_time, step, summary{value{tag, simple_value}}}.
  static std::string encode_scalar_event(const std::string& tag, float value, int64_t step,
                                         double wall_time_s);

 private:
  void write_record(const std::string& payload);

  std::string path_;
  std::FILE* file_ = nullptr;
  bool ok_ = true;
};

/// Writes per-step scalars (train/loss, train/samples_per_s, train/step_ms, time/<phase>_ms,
/// train/lr, train/loss_scale, memory/peak_memory_bytes), eval metrics (eval/<metric>) and device samples
/// (host/cpu_util_pct, host/rss_mib, gpu<N>/util_pct, mem_used_mib, temperature_c, power_w,
/// sm_clock_mhz) at the newest step.
class TensorBoardSink : public TelemetrySink {
 public:
  /// With `resume_step` >= 0 the new file starts with a restart marker at that step.
  explicit TensorBoardSink(const std::string& logdir, int64_t resume_step = -1) : writer_(logdir) {
    if (resume_step >= 0) writer_.add_session_start(resume_step);
  }
  void on_step(const StepRecord& r) override;
  void on_eval(int64_t step, const std::string& metric, double value) override;
  /// train/batch_size and train/lr_multiplier at the step the change takes effect.
  void on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                       const std::string& why) override;
  void on_device_sample(int64_t step, const DeviceSample& sample) override;
  void on_checkpoint(int64_t) override { writer_.flush(); }
  void on_end() override { writer_.flush(); }
  const TensorBoardWriter& writer() const { return writer_; }

 private:
  TensorBoardWriter writer_;
};

}  // namespace saturate
