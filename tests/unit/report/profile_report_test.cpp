// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/profile_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "saturate/diagnose/run_facts.h"
#include "saturate/report/compare.h"

namespace saturate {
namespace {

// A one-process CPU profile with round numbers: 10 ms steps of 32 samples.
Profile cpu_profile() {
  Profile p;
  p.model = "mlp";
  p.data = "synthetic:1,28,28,10,512";
  p.threads = 2;
  p.workers = 1;
  p.train.batch_size = 32;
  p.train.precision = Precision::kFp32;
  p.window_steps = 4;
  p.steps = 12;
  p.throughput.samples_per_s = 3200;
  p.throughput.spread_pct = 1.5;
  p.throughput.windows = 2;
  p.throughput.window_samples_per_s = {3150, 3250};
  p.phases.step_ms = 10;
  p.phases.data_wait_ms = 1;
  p.phases.forward_ms = 3;
  p.phases.backward_ms = 4;
  p.phases.optimizer_ms = 1.5;
  p.phases.other_ms = 0.5;
  p.peak_memory_bytes = 3 << 20;
  p.ranks = {RankTimes{10, 10, 0, 1}};
  p.train_flops_per_sample = 3e6;
  p.achieved_flops_per_s = 9.6e9;
  p.gemm_peak_flops = 96e9;
  p.mfu_peak_flops = 96e9;
  p.mfu_pct = 10;
  p.page_faults_per_step = 20;
  p.page_fault_cost.faults = 1000;
  p.page_fault_cost.us_per_fault = 0.5;
  p.cpu_cache_stats.num_allocations = 100;
  p.cpu_cache_stats.num_system_allocations = 10;
  p.device_samples.count = 3;
  p.device_samples.cpu_util_pct = 80;
  p.device_samples.process_rss_peak_bytes = 64 << 20;
  p.gpu_status = "no NVML (test)";
  return p;
}

Profile two_rank_profile() {
  Profile p = cpu_profile();
  p.phases.communication_ms = 2;
  p.ranks = {RankTimes{10, 8, 2, 1}, RankTimes{10, 10, 0, 1}};
  p.one_process_samples_per_s = 4000;
  return p;
}

std::string table(const Profile& p, const std::vector<Finding>& findings = {}) {
  std::ostringstream out;
  write_profile_table(out, p, findings);
  return out.str();
}

TEST(ProfileReport, TableListsThroughputPhasesComputeAndMemory) {
  const std::string t = table(cpu_profile());
  EXPECT_NE(t.find("saturate profile: mlp on synthetic:1,28,28,10,512, cpu, 2 threads, batch 32, "
                   "fp32\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("  samples/s     3200.0 (median of 2 windows of 4 steps, spread 1.5%)\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("    forward             3.00   30.0%\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("communication"), std::string::npos) << "one process has no communication";
  EXPECT_NE(t.find("  compute       3.0 MFLOP/sample (3x forward), 9.6 GFLOP/s, 10.0% of the "
                   "measured fp32 GEMM peak (96.0 GFLOP/s)\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("  page faults   20 per step (~0.01 ms at 0.50 us each); cpu cache on: 90 of "
                   "100 allocations reused\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("  gpu           no NVML (test)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("  findings: none (no rule fired)\n"), std::string::npos) << t;
}

TEST(ProfileReport, TableNamesTheSlowRankAndTheScalingEfficiency) {
  const std::string t = table(two_rank_profile());
  EXPECT_NE(t.find("    communication       2.00   20.0%\n"), std::string::npos) << t;
  EXPECT_NE(t.find("  ranks (2, global batch 64)  busy ms   comm ms   data ms   vs fastest\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("    rank 1               10.00      0.00      1.00   +25.0%\n"),
            std::string::npos)
      << t;
  // 2 × 3200 against 2 × 4000 alone.
  EXPECT_NE(t.find("  job           6400.0 samples/s (2 ranks × rank 0's); one process alone "
                   "4000.0 samples/s: scaling efficiency 80.0%\n"),
            std::string::npos)
      << t;
}

TEST(ProfileReport, TableSaysWhyTheOneProcessRunIsMissing) {
  Profile p = two_rank_profile();
  p.one_process_samples_per_s = 0;
  p.one_process_why = "out of memory beside the data-parallel run's state";
  EXPECT_NE(table(p).find("; one process alone: out of memory beside"), std::string::npos);
}

TEST(ProfileReport, TablePrintsFindings) {
  Finding f;
  f.severity = Severity::kWarning;
  f.title = "the input pipeline holds training back";
  f.recommendation = "--workers 4";
  const std::string t = table(cpu_profile(), {f});
  EXPECT_NE(t.find("  findings:\n    [warning] the input pipeline holds training back\n"
                   "      → --workers 4\n"),
            std::string::npos)
      << t;
}

TEST(ProfileReport, JsonCarriesEveryFigureAndNullsWhatIsUnknown) {
  Profile p = cpu_profile();
  p.mfu_pct = std::nan("");
  p.mfu_peak_flops = 0;
  p.page_fault_cost.faults = 0;
  const nlohmann::json j = profile_to_json(p, {});
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["model"], "mlp");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["steps"], 12);
  EXPECT_EQ(j["windows"], 2);
  EXPECT_DOUBLE_EQ(j["phases_ms"]["forward"].get<double>(), 3.0);
  EXPECT_EQ(j["phases_ms"].size(), 7u);
  EXPECT_TRUE(j["mfu_pct"].is_null());
  EXPECT_TRUE(j["mfu_peak_gflops"].is_null());
  EXPECT_EQ(j["mfu_peak_precision"], "fp32");
  EXPECT_TRUE(j["host_memory"]["page_fault_us"].is_null());
  EXPECT_DOUBLE_EQ(j["host_memory"]["page_faults_per_step"].get<double>(), 20.0);
  EXPECT_EQ(j["device_samples"]["gpu_status"], "no NVML (test)");
  EXPECT_EQ(j["world_size"], 1);
  EXPECT_FALSE(j.contains("ranks"));
  EXPECT_TRUE(j["findings"].is_array());
  EXPECT_TRUE(j.contains("context"));
}

TEST(ProfileReport, JsonOfSeveralRanksHasTheirTimesAndTheScaling) {
  const nlohmann::json j = profile_to_json(two_rank_profile(), {});
  EXPECT_EQ(j["world_size"], 2);
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["ranks"][0]["busy_ms"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(j["job_samples_per_s"].get<double>(), 6400.0);
  EXPECT_DOUBLE_EQ(j["scaling"]["efficiency"].get<double>(), 0.8);
}

TEST(ProfileReport, CompareReadsTheJson) {
  const RunMetrics m = run_metrics_from_json(profile_to_json(cpu_profile(), {}), "p.json");
  EXPECT_EQ(m.kind, "profile");
  EXPECT_DOUBLE_EQ(m.samples_per_s, 3200.0);
  EXPECT_EQ(m.window_samples_per_s.size(), 2u);
  EXPECT_EQ(m.workload, "mlp on synthetic:1,28,28,10,512, cpu, batch 32, fp32");
}

TEST(ProfileReport, FactsCarryEveryRanksBusyTime) {
  const RunFacts f = profile_facts(two_rank_profile());
  EXPECT_EQ(f.rank_step_ms, (std::vector<double>{8, 10}));
  EXPECT_EQ(f.rank_communication_ms, (std::vector<double>{2, 0}));
  EXPECT_EQ(f.batch_size, 32);
  EXPECT_DOUBLE_EQ(f.gemm_gflops, 96.0);
  EXPECT_DOUBLE_EQ(f.page_fault_us, 0.5);
}

TEST(ProfileReport, LoaderOnlyTableAndJson) {
  LoaderProfile p;
  p.data = "fashion-mnist";
  p.threads = 2;
  p.batch_size = 64;
  p.workers = 2;
  p.prefetch = 2;
  p.batches = 10;
  p.wall_s = 0.5;
  p.samples_per_s = 1280;
  p.cpu_util_pct = 50;
  p.make_batch_ms = 1.25;
  p.wait_ms = 0.5;
  p.cache_hit_rate = 0.25;
  std::ostringstream out;
  write_loader_profile_table(out, p);
  EXPECT_NE(out.str().find("saturate profile --loader-only: fashion-mnist, batch 64, 2 workers, "
                           "prefetch 2\n"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("  cache         25.0% hits\n"), std::string::npos) << out.str();
  const nlohmann::json j = loader_profile_to_json(p);
  EXPECT_EQ(j["batches"], 10);
  EXPECT_DOUBLE_EQ(j["make_batch_ms"].get<double>(), 1.25);
}

}  // namespace
}  // namespace saturate
