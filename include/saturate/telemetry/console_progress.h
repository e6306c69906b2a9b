// SPDX-License-Identifier: Apache-2.0
#pragma once
// ConsoleProgress: a live progress line (step, loss, samples/s, ETA) on a terminal, or a line
// every ~10% when the stream is not a terminal (CI logs stay readable).
//
//   ConsoleProgress bar(std::cerr, /*is_tty=*/isatty(2));
//   trainer.fit(data, &bar);

#include <chrono>
#include <iosfwd>
#include <string>
#include <utility>

#include "saturate/telemetry/telemetry_sink.h"

namespace saturate {

class ConsoleProgress : public TelemetrySink {
 public:
  /// `out` must outlive the sink. Redraws at most every `min_interval_ms` on a terminal.
  /// `transient`: for progress between other output (tune's runs): on a terminal the line is
  /// erased when a run ends; off a terminal nothing is printed.
  ConsoleProgress(std::ostream& out, bool is_tty, std::string label = "train",
                  double min_interval_ms = 100.0, bool transient = false);
  /// What the next run's line starts with.
  void set_label(std::string label) { label_ = std::move(label); }
  void on_begin(int64_t total_steps) override;
  void on_step(const StepRecord& record) override;
  /// --adaptive-batch: the run's length is in samples, so once each step takes `batch` (the
  /// rule only doubles it) the steps left shrink in proportion, and so does the bar's total.
  void on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                       const std::string& why) override;
  void on_end() override;

  /// The text of the progress line for a state (exposed for tests).
  static std::string format_line(const std::string& label, int64_t step, int64_t total,
                                 double loss, double samples_per_s, double eta_s, int width);

 private:
  void draw(bool final_line);

  std::ostream& out_;
  bool is_tty_;
  std::string label_;
  double min_interval_ms_;
  bool transient_;
  int64_t total_ = 0;
  int64_t steps_ = 0;
  int64_t batch_ = 0;  ///< per step since the last batch change (0: none yet)
  int64_t last_printed_decile_ = -1;
  double loss_ema_ = 0.0;
  double samples_per_s_ = 0.0;
  double window_samples_ = 0.0;
  double window_ms_ = 0.0;
  double eta_s_ = -1.0;
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace saturate
