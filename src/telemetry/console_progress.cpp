// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/console_progress.h"

#include <algorithm>
#include <cmath>
#include <ostream>

#include "saturate/core/units.h"

namespace saturate {

ConsoleProgress::ConsoleProgress(std::ostream& out, bool is_tty, std::string label,
                                 double min_interval_ms, bool transient)
    : out_(out),
      is_tty_(is_tty),
      label_(std::move(label)),
      min_interval_ms_(min_interval_ms),
      transient_(transient) {}

void ConsoleProgress::on_begin(int64_t total_steps) {
  total_ = total_steps;
  steps_ = 0;
  batch_ = 0;
  last_printed_decile_ = -1;
  drawn_ = false;
  loss_ema_ = samples_per_s_ = window_samples_ = window_ms_ = 0.0;
  eta_s_ = -1.0;
}

std::string ConsoleProgress::format_line(const std::string& label, int64_t step, int64_t total,
                                         double loss, double samples_per_s, double eta_s,
                                         int width) {
  std::string line = label + " ";
  if (total > 0) {
    const double frac = std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0);
    const int filled = static_cast<int>(std::lround(frac * width));
    line += "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] ";
    line += std::to_string(step) + "/" + std::to_string(total);
  } else {
    line += "step " + std::to_string(step);
  }
  line += "  loss " + format_fixed(loss, 4);
  line += "  " + format_fixed(samples_per_s, 0) + " samples/s";
  if (total > 0) line += "  ETA " + (eta_s >= 0 ? format_duration_s(eta_s) : std::string("--"));
  return line;
}

void ConsoleProgress::on_step(const StepRecord& r) {
  ++steps_;
  // A short exponential average keeps the loss readable without hiding trends.
  loss_ema_ = steps_ == 1 ? r.loss : 0.9 * loss_ema_ + 0.1 * r.loss;
  // Throughput over the recent window of steps; the first step (warm-up) is left out.
  if (steps_ > 1) {
    window_samples_ = 0.95 * window_samples_ + static_cast<double>(r.samples);
    window_ms_ = 0.95 * window_ms_ + r.step_ms;
    if (window_ms_ > 0) samples_per_s_ = window_samples_ / (window_ms_ / 1000.0);
    const double step_s = window_ms_ / 1000.0 / std::max(1e-9, window_samples_) *
                          static_cast<double>(r.samples);
    if (total_ > 0) eta_s_ = step_s * static_cast<double>(total_ - steps_);
  }
  draw(false);
}

void ConsoleProgress::on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                                      const std::string& why) {
  const int64_t before = batch_ > 0 ? batch_ : batch / 2;
  batch_ = batch;
  if (total_ <= 0 || before <= 0 || batch <= 0 || steps_ >= total_) return;
  const int64_t left = total_ - steps_;  // in steps of `before`
  total_ = steps_ + (left * before + batch - 1) / batch;
}

void ConsoleProgress::on_end() {
  if (!transient_) return draw(true);
  if (is_tty_ && drawn_) out_ << "\r\033[K" << std::flush;  // the line goes; output follows
  drawn_ = false;
}

void ConsoleProgress::draw(bool final_line) {
  if (transient_ && !is_tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (is_tty_) {
    const double since = std::chrono::duration<double, std::milli>(now - last_draw_).count();
    if (!final_line && drawn_ && since < min_interval_ms_) return;
    out_ << "\r\033[K" << format_line(label_, steps_, total_, loss_ema_, samples_per_s_, eta_s_, 24);
    if (final_line) out_ << "\n";
    out_.flush();
  } else {
    // Not a terminal: one line per tenth of the run, plus the last.
    const int64_t decile = total_ > 0 ? steps_ * 10 / total_ : steps_ / 100;
    if (!final_line && decile == last_printed_decile_) return;
    if (final_line && drawn_ && last_printed_decile_ == (total_ > 0 ? 10 : -2)) return;
    last_printed_decile_ = decile;
    out_ << format_line(label_, steps_, total_, loss_ema_, samples_per_s_, eta_s_, 24) << "\n";
    out_.flush();
  }
  drawn_ = true;
  last_draw_ = now;
}

}  // namespace saturate
