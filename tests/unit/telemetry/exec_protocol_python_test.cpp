// SPDX-License-Identifier: Apache-2.0
// The C++ reader on what the Python reporter really writes: the fixture scripts of tests/python
// run with the project's virtualenv, their lines read by ExecMetricsReader and their exits
// judged by classify_exec_exit. Skipped when the build knows no Python.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "saturate/core/temp_folder.h"
#include "saturate/telemetry/exec_protocol.h"

namespace saturate {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs a fixture with `env` (NAME=value ...) under a 60 s limit; stdout and stderr to files in
// `dir`. Returns the exit code (or 128 + signal).
int run_fixture(const std::string& dir, const std::string& env, const std::string& script_and_args) {
  const std::string cmd = std::string("cd '") + SATURATE_SOURCE_DIR +
                          "' && env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u SATURATE_METRICS "
                          "PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=python/saturate_client "
                          "SATURATE_PROTOCOL=1 " + env + " timeout -k 5 60 '" +
                          SATURATE_TEST_PYTHON + "' tests/python/fixtures/" + script_and_args +
                          " > '" + dir + "/stdout' 2> '" + dir + "/stderr'";
  const int status = std::system(cmd.c_str());
  if (status == -1) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class ExecProtocolPython : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(SATURATE_TEST_PYTHON).empty()) GTEST_SKIP() << "no Python in this build";
  }
  TempFolder dir_{"exec-protocol", "test"};
};

TEST_F(ExecProtocolPython, ACooperativeScriptsFileReadsAsItsSteps) {
  const std::string metrics = dir_.path() + "/metrics.jsonl";
  const int code = run_fixture(dir_.path(),
                               "SATURATE_METRICS=" + metrics +
                                   " SATURATE_BATCH_SIZE=16 SATURATE_MAX_STEPS=6 SATURATE_SEED=3",
                               "coop_train.py");
  ASSERT_EQ(code, 0) << slurp(dir_.path() + "/stderr");
  ExecMetricsReader r("metrics.jsonl", ExecTransport::kFile);
  r.feed(slurp(metrics));
  r.finish();
  EXPECT_TRUE(r.warnings().empty()) << r.warnings().front();
  ASSERT_EQ(r.starts().size(), 1u);
  EXPECT_EQ(r.starts()[0].applied.value("batch_size", 0), 16);
  ASSERT_EQ(r.steps().size(), 6u);
  for (const ExecStep& s : r.steps()) EXPECT_EQ(s.samples, 16);
  EXPECT_LT(r.steps().front().t, r.steps().back().t);
  ASSERT_TRUE(r.end().has_value());
  ExecExit x;
  x.end = r.end();
  x.stderr_tail = slurp(dir_.path() + "/stderr");
  EXPECT_EQ(classify_exec_exit(x).status, ExecStatus::kOk);
}

TEST_F(ExecProtocolPython, StdoutLinesAreReadAmongTheScriptsOwnOutput) {
  const int code = run_fixture(dir_.path(), "SATURATE_BATCH_SIZE=8 SATURATE_MAX_STEPS=4",
                               "coop_train.py");
  ASSERT_EQ(code, 0) << slurp(dir_.path() + "/stderr");
  const std::string out = slurp(dir_.path() + "/stdout");
  ASSERT_NE(out.find("final loss"), std::string::npos) << out;  // the script's own line
  ExecMetricsReader r("stdout", ExecTransport::kStdout);
  r.feed(out);
  r.finish();
  EXPECT_EQ(r.steps().size(), 4u);
  EXPECT_TRUE(r.warnings().empty());
}

TEST_F(ExecProtocolPython, AnOutOfMemoryScriptIsJudgedOutOfMemory) {
  const std::string metrics = dir_.path() + "/metrics.jsonl";
  ExecExit x;
  x.exit_code = run_fixture(dir_.path(), "SATURATE_METRICS=" + metrics + " SATURATE_BATCH_SIZE=512",
                            "oom_train.py --kind message");
  ASSERT_NE(x.exit_code, 0);
  ExecMetricsReader r("metrics.jsonl", ExecTransport::kFile);
  r.feed(slurp(metrics));
  r.finish();
  x.end = r.end();
  x.stderr_tail = slurp(dir_.path() + "/stderr");
  const ExecOutcome o = classify_exec_exit(x);
  EXPECT_EQ(o.status, ExecStatus::kOom) << o.reason;
  // Without the end line, the stderr alone still says so.
  x.end.reset();
  EXPECT_EQ(classify_exec_exit(x).status, ExecStatus::kOom) << x.stderr_tail;
}

TEST_F(ExecProtocolPython, AScriptThatFailsOtherwiseIsAnErrorWithItsMessage) {
  const std::string metrics = dir_.path() + "/metrics.jsonl";
  ExecExit x;
  x.exit_code = run_fixture(dir_.path(), "SATURATE_METRICS=" + metrics + " SATURATE_MAX_STEPS=8",
                            "coop_train.py --raise-at 3");
  ASSERT_NE(x.exit_code, 0);
  ExecMetricsReader r("metrics.jsonl", ExecTransport::kFile);
  r.feed(slurp(metrics));
  r.finish();
  x.end = r.end();
  x.stderr_tail = slurp(dir_.path() + "/stderr");
  const ExecOutcome o = classify_exec_exit(x);
  EXPECT_EQ(o.status, ExecStatus::kError);
  EXPECT_FALSE(o.reason.empty());
  EXPECT_EQ(r.steps().size(), 2u) << o.reason;
}

}  // namespace
}  // namespace saturate
