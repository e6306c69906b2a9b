// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/console_progress.h"

#include <sstream>

#include <gtest/gtest.h>

namespace saturate {
namespace {

// `n` steps of `samples` samples, 1 ms each.
void run_steps(ConsoleProgress& p, int n, int64_t samples) {
  StepRecord r;
  r.samples = samples;
  r.step_ms = 1.0;
  for (int i = 0; i < n; ++i) p.on_step(r);
}

}  // namespace

TEST(ConsoleProgress, FormatsBarLossThroughputAndEta) {
  EXPECT_EQ(ConsoleProgress::format_line("train", 5, 10, 0.25, 1234.4, 12.0, 10),
            "train [#####.....] 5/10  loss 0.2500  1234 samples/s  ETA 12.0 s");
  EXPECT_EQ(ConsoleProgress::format_line("train", 3, 0, 1.0, 10, -1, 10),
            "train step 3  loss 1.0000  10 samples/s");
}

TEST(ConsoleProgress, PrintsAboutTenLinesWhenNotATerminal) {
  std::ostringstream out;
  ConsoleProgress p(out, /*is_tty=*/false);
  p.on_begin(100);
  run_steps(p, 100, 8);
  p.on_end();
  const std::string text = out.str();
  const auto lines = std::count(text.begin(), text.end(), '\n');
  EXPECT_GE(lines, 10);
  EXPECT_LE(lines, 12);
  EXPECT_NE(text.find("100/100"), std::string::npos);
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

// --adaptive-batch doubles the batch after 40 of 100 steps (the 60 steps' worth of samples
// left take 30 steps: total 70), then again after 20 more (10 steps of 128 left: 5 of 256). The
// bar ends full at 65/65, not at 65/100 with an ETA for steps that never come.
TEST(ConsoleProgress, Issue35_TheTotalFollowsTheAdaptiveBatch) {
  std::ostringstream out;
  ConsoleProgress p(out, /*is_tty=*/false);
  p.on_begin(100);
  run_steps(p, 40, 64);
  p.on_batch_change(40, 128, 1.4, "why");
  run_steps(p, 20, 128);
  p.on_batch_change(60, 256, 2.0, "why");
  run_steps(p, 5, 256);
  p.on_end();
  const std::string text = out.str();
  const std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);
  EXPECT_NE(last.find("[########################] 65/65"), std::string::npos) << text;
}

TEST(ConsoleProgress, RedrawsInPlaceOnATerminal) {
  std::ostringstream out;
  ConsoleProgress p(out, /*is_tty=*/true, "train", /*min_interval_ms=*/0.0);
  p.on_begin(3);
  run_steps(p, 3, 1);
  p.on_end();
  const std::string text = out.str();
  EXPECT_NE(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace saturate
