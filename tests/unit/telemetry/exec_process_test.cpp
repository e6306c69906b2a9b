// SPDX-License-Identifier: Apache-2.0
// run_exec on real child processes (/bin/sh scripts): each limit stops a program that breaks it
// — one that hangs after a step, one that never reports, one that ignores SIGTERM, one that
// grows past a memory limit — and the test checks that no process of its group is left.
#include <signal.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "saturate/core/error.h"
#include "saturate/core/temp_folder.h"
#include "saturate/telemetry/exec_process.h"
#include "saturate/telemetry/proc_stats.h"

namespace saturate {
namespace {

const char* const kStart = R"({"v":1,"ev":"start","t":1})";

// A protocol line on stdout from sh: printf with the prefix. `t` counts up with the step.
std::string step_line(int step) {
  return "printf ':::SATURATE {\"v\":1,\"ev\":\"step\",\"t\":" + std::to_string(step + 1) +
         ",\"step\":" + std::to_string(step) + ",\"samples\":8}\\n'; ";
}

std::string start_line() { return std::string("printf ':::SATURATE ") + kStart + "\\n'; "; }

ExecLaunch shell(const TempFolder& dir, const std::string& script) {
  ExecLaunch l;
  l.argv = {"/bin/sh", "-c", script};
  l.run_dir = dir.path();
  l.grace_s = 1;
  l.sample_interval_s = 0.05;
  l.wall_limit_s = 30;  // the test's own bound
  return l;
}

bool group_gone(int64_t pgid) {
  for (const PidStat& p : read_process_group(pgid))
    if (p.state != 'Z') return false;
  return true;
}

TEST(ExecProcess, ReadsStdoutLinesAndExitsOk) {
  const TempFolder dir("saturate-exec-test", "test");
  ExecRun r = run_exec(shell(dir, start_line() + step_line(1) + step_line(2) +
                                      "echo 'plain output'; echo warn >&2"));
  EXPECT_EQ(r.outcome.status, ExecStatus::kOk) << r.outcome.reason;
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[1].samples, 8);
  EXPECT_EQ(r.stopped, ExecStopReason::kNone);
  EXPECT_TRUE(r.group_left_empty);
  EXPECT_EQ(r.exit.stderr_tail, "warn\n");
}

TEST(ExecProcess, ReadsTheMetricsFile) {
  const TempFolder dir("saturate-exec-test", "test");
  ExecLaunch l = shell(dir, std::string("printf '") + kStart + "\\n' >> \"$M\"; printf "
                                "'{\"v\":1,\"ev\":\"step\",\"t\":2,\"step\":1,\"samples\":4}\\n' "
                                ">> \"$M\"");
  l.metrics_path = dir.file("metrics.jsonl");
  l.env = {{"M", l.metrics_path}};
  const ExecRun r = run_exec(l);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].samples, 4);
}

TEST(ExecProcess, HangAfterAStepIsStoppedAtTheNoProgressLimitWithItsChildren) {
  const TempFolder dir("saturate-exec-test", "test");
  ExecLaunch l = shell(dir, start_line() + step_line(1) + "sleep 300 & sleep 300; wait");
  l.no_progress_s = 0.5;
  const ExecRun r = run_exec(l);
  EXPECT_EQ(r.stopped, ExecStopReason::kNoProgress);
  EXPECT_EQ(r.outcome.status, ExecStatus::kError);
  EXPECT_NE(r.outcome.reason.find("no step reported for"), std::string::npos) << r.outcome.reason;
  EXPECT_NE(r.outcome.reason.find("after step 1"), std::string::npos) << r.outcome.reason;
  EXPECT_TRUE(r.group_left_empty);
  EXPECT_GE(r.processes.size(), 2u);  // the shell and its sleeps were sampled
  EXPECT_LT(r.wall_s, 10);
}

TEST(ExecProcess, NeverReportingAStepHitsTheStartUpLimit) {
  const TempFolder dir("saturate-exec-test", "test");
  ExecLaunch l = shell(dir, "sleep 300");
  l.no_progress_s = 100;
  l.startup_limit_s = 0.5;
  const ExecRun r = run_exec(l);
  EXPECT_EQ(r.stopped, ExecStopReason::kNoProgress);
  EXPECT_NE(r.outcome.reason.find("no step reported within"), std::string::npos)
      << r.outcome.reason;
  EXPECT_TRUE(r.steps.empty());
}

TEST(ExecProcess, ProgramIgnoringSigtermIsKilledAfterTheGracePeriod) {
  const TempFolder dir("saturate-exec-test", "test");
  ExecLaunch l = shell(dir, "trap '' TERM; " + start_line() + step_line(1) +
                                "while :; do sleep 0.1; done");
  l.no_progress_s = 0.3;
  l.grace_s = 0.5;
  const ExecRun r = run_exec(l);
  EXPECT_EQ(r.exit.signal, SIGKILL);
  EXPECT_TRUE(r.exit.signal_sent_by_saturate);
  EXPECT_TRUE(r.group_left_empty);
}

TEST(ExecProcess, EnoughStepsStopsAProgramThatDoesNotStopItselfAsOk) {
  const TempFolder dir("saturate-exec-test", "test");
  ExecLaunch l = shell(dir, start_line() + step_line(1) + step_line(2) + step_line(3) +
                                "sleep 300");
  l.stop_after_steps = 3;
  l.grace_s = 0.2;
  const ExecRun r = run_exec(l);
  EXPECT_EQ(r.stopped, ExecStopReason::kEnoughSteps);
  EXPECT_EQ(r.outcome.status, ExecStatus::kOk) << r.outcome.reason;
  EXPECT_EQ(r.steps.size(), 3u);
}

TEST(ExecProcess, GroupOverTheMemoryLimitIsStoppedAsOutOfMemory) {
  const TempFolder dir("saturate-exec-test", "test");
  // 200 MiB held in a shell variable by a child: over a 64 MiB limit.
  ExecLaunch l = shell(dir, start_line() +
                                "x=$(head -c 209715200 /dev/zero | tr '\\0' a); sleep 300");
  l.memory_limit_bytes = int64_t{64} << 20;
  const ExecRun r = run_exec(l);
  EXPECT_EQ(r.outcome.status, ExecStatus::kOom) << r.outcome.reason;
  EXPECT_FALSE(r.memory_limit_how.empty());
  EXPECT_GT(r.peak_rss_bytes, int64_t{64} << 20);
  EXPECT_TRUE(r.group_left_empty);
}

TEST(ExecProcess, OutOfMemoryMessageOnStderrIsOom) {
  const TempFolder dir("saturate-exec-test", "test");
  const ExecRun r = run_exec(shell(dir, "echo 'RuntimeError: CUDA out of memory. Tried' >&2; "
                                        "exit 1"));
  EXPECT_EQ(r.outcome.status, ExecStatus::kOom);
}

TEST(ExecProcess, FailureKeepsTheProgramsMessage) {
  const TempFolder dir("saturate-exec-test", "test");
  const ExecRun r = run_exec(shell(dir, "echo 'ValueError: bad label 11' >&2; exit 3"));
  EXPECT_EQ(r.outcome.status, ExecStatus::kError);
  EXPECT_NE(r.outcome.reason.find("ValueError: bad label 11"), std::string::npos)
      << r.outcome.reason;
}

TEST(ExecProcess, FatalLineStopsTheGroupAndThrows) {
  const TempFolder dir("saturate-exec-test", "test");
  ExecLaunch l = shell(dir, "echo $$ > \"$D/pid\"; printf ':::SATURATE {\"v\":2,\"ev\":"
                            "\"start\",\"t\":1}\\n'; sleep 300");
  l.env = {{"D", dir.path()}};
  try {
    run_exec(l);
    FAIL() << "a version 2 line must be fatal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("protocol version 2"), std::string::npos) << e.what();
  }
  FILE* f = fopen(dir.file("pid").c_str(), "r");
  ASSERT_NE(f, nullptr);
  long pid = 0;
  ASSERT_EQ(fscanf(f, "%ld", &pid), 1);
  fclose(f);
  EXPECT_TRUE(group_gone(pid));
}

TEST(ExecProcess, ProgramThatDoesNotExistIsAUsageError) {
  const TempFolder dir("saturate-exec-test", "test");
  ExecLaunch l = shell(dir, "");
  l.argv = {"saturate-no-such-program-xyz"};
  EXPECT_THROW(run_exec(l), Error);
}

TEST(PidStat, ParsesANameWithSpacesAndParentheses) {
  const auto s = parse_pid_stat(
      "42 (pt (data) w) S 7 42 42 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 3 0 100 1000 77 x");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->comm, "pt (data) w");
  EXPECT_EQ(s->ppid, 7);
  EXPECT_EQ(s->pgrp, 42);
  EXPECT_EQ(s->cpu_ticks, 300u);
  EXPECT_EQ(s->rss_pages, 77);
  EXPECT_FALSE(parse_pid_stat("42 (x) S 1 2").has_value());
}

}  // namespace
}  // namespace saturate
