// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/phase_timer.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "saturate/core/error.h"

namespace saturate {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST(SteadyPhaseTimer, PhasesSumToTheStepAndLandWhereTheTimeWent) {
  auto timer = make_steady_phase_timer();
  EXPECT_EQ(timer->clock_name(), "steady_clock");
  timer->begin();
  sleep_ms(20);
  timer->mark(Phase::kDataWait);
  timer->mark(Phase::kHostToDevice);
  for (int micro = 0; micro < 2; ++micro) {
    sleep_ms(5);
    timer->mark(Phase::kForward);
    timer->mark(Phase::kBackward);
  }
  sleep_ms(3);  // after the last mark: "other"
  const int64_t ticket = timer->finish();
  ASSERT_TRUE(timer->ready(ticket));
  StepRecord r;
  timer->read(ticket, r);
  EXPECT_GE(r.data_wait_ms, 20.0);
  EXPECT_GE(r.forward_ms, 10.0);  // both micro-batches' forward times add up
  EXPECT_GE(r.other_ms, 3.0);
  EXPECT_LT(r.backward_ms, r.forward_ms);
  EXPECT_NEAR(phase_sum_ms(r), r.step_ms, 1e-9 * r.step_ms + 1e-12);
  EXPECT_FALSE(timer->ready(ticket)) << "a read ticket is forgotten";
}

// Issue 19: a pipeline stage's schedule interleaves its phases; the trace draws them as they
// ran. Consecutive marks of one phase are one span, and a step whose phases did not interleave
// keeps none (its totals say it all).
TEST(SteadyPhaseTimer, Issue19_InterleavedPhasesAreKeptInTheOrderTheyRan) {
  auto timer = make_steady_phase_timer();
  timer->begin();
  timer->mark(Phase::kDataWait);
  sleep_ms(2);
  timer->mark(Phase::kForward);
  sleep_ms(4);
  timer->mark(Phase::kCommunication);
  sleep_ms(2);
  timer->mark(Phase::kForward);
  timer->mark(Phase::kForward);
  sleep_ms(2);
  timer->mark(Phase::kBackward);
  StepRecord r;
  timer->read(timer->finish(), r);
  ASSERT_EQ(r.spans.size(), 5u);
  const int want[] = {0, 2, 5, 2, 3};
  for (size_t i = 0; i < r.spans.size(); ++i) {
    EXPECT_EQ(r.spans[i].phase, want[i]) << i;
    if (i > 0) {
      EXPECT_NEAR(r.spans[i].start_ms, r.spans[i - 1].start_ms + r.spans[i - 1].ms, 1e-6);
    }
  }
  EXPECT_GE(r.spans[2].ms, 4.0);
  EXPECT_NEAR(r.spans[1].ms + r.spans[3].ms, r.forward_ms, 1e-9);
  timer->begin();
  timer->mark(Phase::kForward);
  timer->mark(Phase::kBackward);
  timer->mark(Phase::kOptimizer);
  StepRecord plain;
  timer->read(timer->finish(), plain);
  EXPECT_TRUE(plain.spans.empty());
}

TEST(SteadyPhaseTimer, FinishedStepsCanBeReadLaterAndInAnyOrder) {
  auto timer = make_steady_phase_timer();
  std::vector<int64_t> tickets;
  for (int i = 0; i < 3; ++i) {
    timer->begin();
    sleep_ms(2 + 4 * i);
    timer->mark(Phase::kOptimizer);
    tickets.push_back(timer->finish());
  }
  StepRecord last, first;
  timer->read(tickets[2], last);
  timer->read(tickets[0], first);
  EXPECT_GT(last.optimizer_ms, first.optimizer_ms);
  EXPECT_TRUE(timer->ready(tickets[1]));
}

TEST(SteadyPhaseTimer, MisuseIsAnInternalError) {
  auto timer = make_steady_phase_timer();
  EXPECT_THROW(timer->mark(Phase::kForward), InternalError);
  EXPECT_THROW(timer->finish(), InternalError);
  timer->begin();
  EXPECT_THROW(timer->begin(), InternalError);
  StepRecord r;
  EXPECT_THROW(timer->read(99, r), InternalError);
}

}  // namespace saturate
