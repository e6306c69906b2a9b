// SPDX-License-Identifier: Apache-2.0
// The exec protocol's reader rules (docs/exec-protocol.md §5) and trial outcomes (§7), each rule
// on a line or an exit that breaks it.
#include "saturate/telemetry/exec_protocol.h"

#include <csignal>
#include <functional>
#include <cmath>

#include <gtest/gtest.h>

#include "saturate/core/error.h"

namespace saturate {
namespace {

const char* kStart = R"({"v":1,"ev":"start","t":100.0,"applied":{"batch_size":96},"ignored":["pin_memory"],"world_size":2})";

std::string step_line(int64_t step, double t, int64_t samples = 96) {
  return R"({"v":1,"ev":"step","t":)" + std::to_string(t) + R"(,"step":)" + std::to_string(step) +
         R"(,"samples":)" + std::to_string(samples) + R"(,"loss":null,"data_wait_s":0.01})";
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ExecProtocol, ReadsAWholeTrialFedInPieces) {
  ExecMetricsReader r("metrics.jsonl", ExecTransport::kFile);
  const std::string all = std::string(kStart) + "\n" + step_line(1, 101) + "\n" + step_line(2, 102) +
                          "\n" + R"({"v":1,"ev":"eval","t":103,"step":2,"name":"val_loss","value":1.5})" +
                          "\n" + R"({"v":1,"ev":"end","t":104,"status":"ok"})" + "\n";
  for (size_t i = 0; i < all.size(); i += 7) r.feed(std::string_view(all).substr(i, 7));
  r.finish();
  ASSERT_EQ(r.starts().size(), 1u);
  EXPECT_EQ(r.starts()[0].applied["batch_size"], 96);
  EXPECT_EQ(r.starts()[0].ignored, std::vector<std::string>{"pin_memory"});
  EXPECT_EQ(r.starts()[0].world_size, 2);
  ASSERT_EQ(r.steps().size(), 2u);
  EXPECT_EQ(r.steps()[1].step, 2);
  EXPECT_DOUBLE_EQ(r.steps()[1].t, 102);
  EXPECT_TRUE(std::isnan(r.steps()[0].loss));  // null reads as NaN
  EXPECT_DOUBLE_EQ(r.steps()[0].data_wait_s, 0.01);
  ASSERT_EQ(r.evals().size(), 1u);
  EXPECT_EQ(r.evals()[0].name, "val_loss");
  ASSERT_TRUE(r.end().has_value());
  EXPECT_EQ(r.end()->status, ExecStatus::kOk);
  EXPECT_TRUE(r.warnings().empty());
}

TEST(ExecProtocol, AnUnknownVersionIsFatalNamingTheLine) {
  ExecMetricsReader r("metrics.jsonl", ExecTransport::kFile);
  const std::string m = message_of([&] { r.feed(R"({"v":2,"ev":"start","t":1})" "\n"); });
  EXPECT_EQ(m, "metrics.jsonl:1: protocol version 2 is not supported (this saturate speaks 1)");
}

TEST(ExecProtocol, AMalformedStartOrEndIsFatalOtherLinesAreWarnings) {
  ExecMetricsReader r("metrics.jsonl", ExecTransport::kFile);
  EXPECT_NE(message_of([&] { r.feed(R"({"v":1,"ev":"start","t":"soon"})" "\n"); })
                .find("metrics.jsonl:1: a malformed start line: 't' must be a number"),
            std::string::npos);
  ExecMetricsReader ok("m", ExecTransport::kFile);
  ok.feed(std::string(kStart) + "\n");
  ok.feed(R"({"v":1,"ev":"step","t":101,"step":1})" "\n");  // no samples
  ok.feed("not json at all\n");
  ok.feed(step_line(2, 102) + "\n");
  EXPECT_EQ(ok.steps().size(), 1u);
  ASSERT_EQ(ok.warnings().size(), 2u);
  EXPECT_EQ(ok.warnings()[0], "m:2: 'samples' is missing; line ignored");
  EXPECT_EQ(ok.warnings()[1], "m:3: not a JSON object; line ignored");
  EXPECT_NE(message_of([&] { ok.feed(R"({"v":1,"ev":"end","t":103,"status":"fine"})" "\n"); })
                .find("m:5: a malformed end line: 'status' must be ok, oom or error"),
            std::string::npos);
}

TEST(ExecProtocol, LinesBeforeStartAndASecondStartAreFatal) {
  ExecMetricsReader r("m", ExecTransport::kFile);
  EXPECT_EQ(message_of([&] { r.feed(step_line(1, 1) + "\n"); }),
            "m:1: a 'step' line before the start line");
  ExecMetricsReader twice("m", ExecTransport::kFile);
  twice.feed(std::string(kStart) + "\n");
  EXPECT_EQ(message_of([&] { twice.feed(std::string(kStart) + "\n"); }), "m:2: a second start line");
}

TEST(ExecProtocol, BackwardsStepsAndTimesAreIgnoredAndTooManyIgnoredLinesAreFatal) {
  ExecMetricsReader r("m", ExecTransport::kFile);
  r.feed(std::string(kStart) + "\n" + step_line(5, 105) + "\n" + step_line(5, 106) + "\n" +
         step_line(6, 104) + "\n");
  EXPECT_EQ(r.steps().size(), 1u);
  EXPECT_EQ(r.ignored_lines(), 2);
  std::string m;
  for (int i = 0; i < 20 && m.empty(); ++i) m = message_of([&] { r.feed("{}\n"); });
  EXPECT_NE(m.find("more than 10 lines ignored"), std::string::npos) << m;
  EXPECT_NE(m.find("does not speak saturate's exec protocol"), std::string::npos) << m;
}

TEST(ExecProtocol, StdoutTakesOnlyPrefixedLinesAndCountsEveryLine) {
  ExecMetricsReader r("stdout", ExecTransport::kStdout);
  r.feed("epoch 1\n:::SATURATE " + std::string(kStart) + "\r\nloss 2.3\n:::SATURATE " +
         step_line(1, 101) + "\n:::SATURATE {\"v\":1,\"ev\":\"step\",\"t\":102}\n");
  EXPECT_EQ(r.steps().size(), 1u);
  ASSERT_EQ(r.warnings().size(), 1u);
  EXPECT_EQ(r.warnings()[0], "stdout:5: 'step' is missing; line ignored");
}

TEST(ExecProtocol, AnUnterminatedLastLineIsDroppedAtExitAndLinesAfterEndIgnored) {
  ExecMetricsReader r("m", ExecTransport::kFile);
  r.feed(std::string(kStart) + "\n" + R"({"v":1,"ev":"end","t":101,"status":"oom","message":"x"})" +
         "\n" + step_line(1, 102) + "\n" + step_line(2, 103).substr(0, 20));
  r.finish();
  EXPECT_TRUE(r.steps().empty());
  EXPECT_EQ(r.ignored_lines(), 1);  // the step after end; the cut line is not counted
  EXPECT_EQ(r.end()->status, ExecStatus::kOom);
}

TEST(ExecProtocol, AllRanksNeedARankAndKeepTheirOwnOrder) {
  ExecMetricsReader r("m", ExecTransport::kFile, /*all_ranks=*/true);
  r.feed(R"({"v":1,"ev":"start","t":1,"rank":0})" "\n" R"({"v":1,"ev":"start","t":1,"rank":1})" "\n");
  r.feed(R"({"v":1,"ev":"step","t":2,"step":1,"samples":8,"rank":1})" "\n");
  r.feed(R"({"v":1,"ev":"step","t":2,"step":1,"samples":8,"rank":0})" "\n");
  EXPECT_EQ(r.steps().size(), 2u);
  EXPECT_NE(message_of([&] { r.feed(R"({"v":1,"ev":"start","t":3})" "\n"); }).find("'rank' is missing"),
            std::string::npos);
}

ExecExit exited(int code, const std::string& stderr_tail = "") {
  ExecExit x;
  x.exit_code = code;
  x.stderr_tail = stderr_tail;
  return x;
}

TEST(ExecOutcomeRules, OutOfMemoryIsRecognisedInTheProtocolsOrder) {
  ExecExit end_oom = exited(0);
  end_oom.end = ExecEnd{0, 1, ExecStatus::kOom, "OutOfMemoryError: CUDA out of memory. Tried"};
  EXPECT_EQ(classify_exec_exit(end_oom).status, ExecStatus::kOom);
  EXPECT_EQ(classify_exec_exit(exited(75)).status, ExecStatus::kOom);
  ExecExit elastic = exited(1);
  elastic.error_file =
      R"({"message":{"message":"RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes","extraInfo":{}}})";
  EXPECT_EQ(classify_exec_exit(elastic).status, ExecStatus::kOom);
  const ExecOutcome tail = classify_exec_exit(exited(
      1, "Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"));
  EXPECT_EQ(tail.status, ExecStatus::kOom);
  EXPECT_EQ(tail.reason, "stderr: CUDA out of memory");
  EXPECT_EQ(classify_exec_exit(exited(1, "RuntimeError: DataLoader worker (pid 77) is killed by signal: Killed.\n"))
                .status,
            ExecStatus::kOom);
  EXPECT_EQ(classify_exec_exit(exited(1, "Traceback...\nMemoryError\n")).status, ExecStatus::kOom);
  ExecExit killer;
  killer.signal = SIGKILL;
  killer.oom_kill_rose = true;
  EXPECT_EQ(classify_exec_exit(killer).status, ExecStatus::kOom);
}

TEST(ExecOutcomeRules, OtherFailuresAreErrorsWithTheProgramsOwnMessage) {
  // Not out of memory though they mention memory-ish things: cuDNN, a launch configuration,
  // a worker that exited without a signal, a MemoryError inside another word.
  for (const char* text : {"RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\n",
                           "RuntimeError: CUDA error: invalid configuration argument\n",
                           "RuntimeError: DataLoader worker (pid 9) exited unexpectedly\n",
                           "ValueError: not a CustomMemoryError here\n"}) {
    const ExecOutcome o = classify_exec_exit(exited(1, text));
    EXPECT_EQ(o.status, ExecStatus::kError) << text;
    EXPECT_NE(o.reason.find("exit status 1: "), std::string::npos) << o.reason;
  }
  // A SIGKILL saturate sent (its no-progress limit) is not the kernel's OOM killer.
  ExecExit ours;
  ours.signal = SIGKILL;
  ours.signal_sent_by_saturate = true;
  ours.oom_kill_rose = true;
  EXPECT_EQ(classify_exec_exit(ours).reason, "killed by signal 9 (sent by saturate)");
  // An end line that says ok does not outweigh a nonzero exit.
  ExecExit lied = exited(3);
  lied.end = ExecEnd{0, 1, ExecStatus::kOk, ""};
  EXPECT_EQ(classify_exec_exit(lied).status, ExecStatus::kError);
  ExecExit said = exited(0);
  said.end = ExecEnd{0, 1, ExecStatus::kError, "ValueError: bad label 11\nmore"};
  EXPECT_EQ(classify_exec_exit(said).reason, "its end line says error: ValueError: bad label 11");
  EXPECT_EQ(classify_exec_exit(exited(0)).status, ExecStatus::kOk);
}

}  // namespace
}  // namespace saturate
