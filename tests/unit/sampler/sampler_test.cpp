// SPDX-License-Identifier: Apache-2.0
// Tests for the /proc parsers, the dlopen'ed NVML reader (against tests/fake_nvml) and the
// background DeviceSampler.
#include <chrono>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "saturate/core/error.h"
#include "saturate/telemetry/file_sinks.h"
#include "saturate/telemetry/nvml.h"
#include "saturate/telemetry/proc_stats.h"
#include "saturate/telemetry/device_sampler.h"

namespace saturate {
namespace {

constexpr const char* kFakeNvml = SATURATE_FAKE_NVML;
constexpr int64_t kGiB = 1024LL * 1024 * 1024;

// Two readings of a two-core machine, one second apart at 100 Hz.
constexpr const char* kStatBefore =
    "cpu  1000 0 500 8000 500 0 0 0 0 0\n"
    "cpu0 500 0 250 4000 250 0 0 0 0 0\n"
    "cpu1 500 0 250 4000 250 0 0 0 0 0\n"
    "intr 12345 0 0\n"
    "ctxt 999\n";
// A reading whose aggregate counters went backwards, as after a counter reset.
constexpr const char* kStatReset = "cpu  1100 0 100 8000 0 0 0 0 0 0\n";

TEST(ProcStats, ParsesAggregateAndPerCoreJiffies) {
  ProcStat s = parse_proc_stat(kStatBefore);
  EXPECT_EQ(s.all.total, 10000u);
  EXPECT_EQ(s.all.idle, 8500u);  // idle + iowait
  ASSERT_EQ(s.cores.size(), 2u);
  EXPECT_EQ(s.cores[0].total, 5000u);
  EXPECT_EQ(s.cores[0].idle, 4250u);
}

TEST(ProcStats, GuestTimeIsNotCountedTwice) {
  ProcStat s = parse_proc_stat("cpu 10 0 0 10 0 0 0 0 7 3\n");
  EXPECT_EQ(s.all.total, 20u);
}

TEST(ProcStats, OlderKernelsWithFewerColumnsParse) {
  ProcStat s = parse_proc_stat("cpu 10 0 10 80\ncpu0 10 0 10 80\n");
  EXPECT_EQ(s.all.total, 100u);
  EXPECT_EQ(s.all.idle, 80u);
  EXPECT_EQ(s.cores.size(), 1u);
}

TEST(ProcStats, UtilisationBetweenTwoReadings) {
  ProcStat before = parse_proc_stat(kStatBefore);
  ProcStat after = parse_proc_stat(
      "cpu  1075 0 525 8150 500 0 0 0 0 0\n"
      "cpu0 575 0 275 4050 250 0 0 0 0 0\n"   // +75 user +25 system +50 idle
      "cpu1 500 0 250 4100 250 0 0 0 0 0\n");  // only idle grew
  CpuSample cpu = cpu_util_between(before, after);
  EXPECT_NEAR(cpu.util_pct, 100.0 * 100 / 250, 1e-9);  // +100 busy of +250
  ASSERT_EQ(cpu.per_core_util_pct.size(), 2u);
  EXPECT_NEAR(cpu.per_core_util_pct[0], 100.0 * 100 / 150, 1e-9);
  EXPECT_NEAR(cpu.per_core_util_pct[1], 0.0, 1e-9);
  EXPECT_EQ(cpu.process_rss_bytes, 0);
}

TEST(ProcStats, NoElapsedTimeOrBackwardsCountersGiveZero) {
  ProcStat before = parse_proc_stat(kStatBefore);
  EXPECT_EQ(cpu_util_between(before, before).util_pct, 0.0);
  EXPECT_EQ(cpu_util_between(before, parse_proc_stat(kStatReset)).util_pct, 0.0);
  EXPECT_EQ(cpu_util_between(ProcStat{}, ProcStat{}).per_core_util_pct.size(), 0u);
}

TEST(ProcStats, ParsesVmRssInKibibytes) {
  const std::string status =
      "Name:\tsaturate\nVmPeak:\t  999999 kB\nVmRSS:\t   12345 kB\nThreads:\t4\n";
  EXPECT_EQ(parse_vm_rss_bytes(status), 12345 * 1024);
}

TEST(ProcStats, MissingOrMalformedVmRssIsNullopt) {
  EXPECT_FALSE(parse_vm_rss_bytes("Name:\tkthreadd\nState:\tS\n").has_value());
  EXPECT_FALSE(parse_vm_rss_bytes("VmRSS:\tlots kB\n").has_value());
  EXPECT_FALSE(parse_vm_rss_bytes("").has_value());
}

TEST(ProcStats, LiveReadersReturnSaneValues) {
  EXPECT_GT(read_process_rss_bytes(), 0);
  ProcStat s = read_proc_stat();
  EXPECT_GE(s.cores.size(), 1u);
  EXPECT_GT(s.all.total, 0u);
  EXPECT_LE(s.all.idle, s.all.total);
}

TEST(Nvml, NamesThrottleReasonBitsLowestFirst) {
  EXPECT_EQ(nvml_throttle_reason_names(0x44),
            (std::vector<std::string>{"sw_power_cap", "hw_thermal_slowdown"}));
  EXPECT_EQ(nvml_throttle_reason_names(0x1 | 0x100),
            (std::vector<std::string>{"gpu_idle", "display_clock_setting"}));
  EXPECT_TRUE(nvml_throttle_reason_names(0).empty());
  EXPECT_TRUE(nvml_throttle_reason_names(0x10000).empty());  // undocumented bit
}

TEST(Nvml, MissingLibraryIsNotLoadedAndSaysWhy) {
  const std::string path = "/nonexistent/libnvidia-ml.so.1";
  Nvml nvml(path);
  EXPECT_FALSE(nvml.is_loaded());
  EXPECT_EQ(nvml.library_path(), path);
  const std::string& why = nvml.unavailable_reason();
  EXPECT_EQ(why.rfind("no NVML: " + path + " cannot be loaded (", 0), 0u) << why;
  EXPECT_NE(why.find("No such file"), std::string::npos) << why;  // the dlerror text
  EXPECT_TRUE(nvml.sample().empty());
  EXPECT_EQ(nvml.device_count(), 0);
}

TEST(Nvml, LibraryPathComesFromEnvironmentWhenNotGiven) {
  ASSERT_EQ(::setenv("SATURATE_NVML_LIBRARY", kFakeNvml, 1), 0);
  Nvml nvml;
  ::unsetenv("SATURATE_NVML_LIBRARY");
  EXPECT_EQ(nvml.library_path(), kFakeNvml);
  EXPECT_TRUE(nvml.is_loaded()) << nvml.unavailable_reason();
}

TEST(Nvml, FailedInitIsNotLoadedWithCode) {
  ASSERT_EQ(::setenv("FAKE_NVML_INIT_ERROR", "9", 1), 0);
  Nvml nvml(kFakeNvml);
  ::unsetenv("FAKE_NVML_INIT_ERROR");
  EXPECT_FALSE(nvml.is_loaded());
  EXPECT_EQ(nvml.unavailable_reason(), "NVML init failed (code 9)");
  EXPECT_TRUE(nvml.sample().empty());
}

TEST(Nvml, ReadsEveryFieldFromFakeLibrary) {
  Nvml nvml(kFakeNvml);
  ASSERT_TRUE(nvml.is_loaded()) << nvml.unavailable_reason();
  EXPECT_TRUE(nvml.unavailable_reason().empty());
  EXPECT_EQ(nvml.device_count(), 2);
  std::vector<GpuSample> gpus = nvml.sample();
  ASSERT_EQ(gpus.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const GpuSample& g = gpus[static_cast<size_t>(i)];
    EXPECT_EQ(g.index, i);
    EXPECT_EQ(g.name, "Fake GPU " + std::to_string(i));
    EXPECT_EQ(g.util_pct, 37.0);
    EXPECT_EQ(g.mem_used_bytes, 1 * kGiB);
    EXPECT_EQ(g.mem_total_bytes, 80 * kGiB);
    EXPECT_EQ(g.temperature_c, 55.0);
    EXPECT_EQ(g.power_w, 250.0);
    EXPECT_GT(g.energy_j, 1000.0);  // the fake's counter starts at 1000000 mJ
    EXPECT_EQ(g.sm_clock_mhz, 1410.0);
  }
  EXPECT_EQ(gpus[0].throttle_reasons, 0u);
  EXPECT_TRUE(gpus[0].throttle_names.empty());
  EXPECT_EQ(gpus[1].throttle_reasons, 0x44u);
  EXPECT_EQ(gpus[1].throttle_names,
            (std::vector<std::string>{"sw_power_cap", "hw_thermal_slowdown"}));
}

TEST(Nvml, EnergyCounterIncreasesBetweenSamples) {
  Nvml nvml(kFakeNvml);
  ASSERT_TRUE(nvml.is_loaded()) << nvml.unavailable_reason();
  std::vector<GpuSample> first = nvml.sample();
  std::vector<GpuSample> second = nvml.sample();
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_DOUBLE_EQ(second[0].energy_j - first[0].energy_j, 1.0);  // +1000 mJ per call
  EXPECT_DOUBLE_EQ(second[1].energy_j - first[1].energy_j, 1.0);
}

TEST(DeviceSampler, RejectsIntervalsOutsideRange) {
  for (double bad : {0.0, -5.0, 60000.5, 1e9, std::numeric_limits<double>::quiet_NaN()}) {
    SamplerOptions o;
    o.interval_ms = bad;
    o.sample_gpus = false;
    try {
      DeviceSampler s(o);
      ADD_FAILURE() << "interval " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("sampler: --interval must be", 0), 0u) << e.what();
    }
  }
  SamplerOptions edge;
  edge.interval_ms = 60000;
  edge.sample_gpus = false;
  EXPECT_NO_THROW(DeviceSampler{edge});
}

TEST(DeviceSampler, CollectsSamplesWithFakeGpusAndStopsPromptly) {
  SamplerOptions o;
  o.interval_ms = 10;
  o.nvml_library = kFakeNvml;
  DeviceSampler sampler(o);
  EXPECT_EQ(sampler.gpu_status(), "NVML: 2 GPUs");
  EXPECT_FALSE(sampler.latest().has_value());
  sampler.start();
  EXPECT_TRUE(sampler.is_running());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  const auto t = std::chrono::steady_clock::now();
  sampler.stop();
  const double stop_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  EXPECT_LT(stop_ms, 50.0);
  EXPECT_FALSE(sampler.is_running());

  std::vector<DeviceSample> samples = sampler.samples();
  ASSERT_GE(samples.size(), 3u);
  for (size_t i = 0; i < samples.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(samples[i].gpus.size(), 2u);
    EXPECT_EQ(samples[i].gpus[1].throttle_names.size(), 2u);
    EXPECT_GT(samples[i].cpu.process_rss_bytes, 0);
    EXPECT_GT(samples[i].t_s, 0.0);
    if (i > 0) {
      EXPECT_GT(samples[i].t_s, samples[i - 1].t_s);
      EXPECT_GT(samples[i].gpus[0].energy_j, samples[i - 1].gpus[0].energy_j);
    }
  }
  ASSERT_TRUE(sampler.latest().has_value());
  EXPECT_EQ(sampler.latest()->t_s, samples.back().t_s);
}

TEST(DeviceSampler, StopReturnsPromptlyWithLongInterval) {
  SamplerOptions o;
  o.interval_ms = 60000;
  o.sample_gpus = false;
  DeviceSampler sampler(o);
  sampler.start();
  const auto t = std::chrono::steady_clock::now();
  sampler.stop();
  using Ms = std::chrono::duration<double, std::milli>;
  const double stop_ms = Ms(std::chrono::steady_clock::now() - t).count();
  EXPECT_LT(stop_ms, 50.0);
  EXPECT_TRUE(sampler.samples().empty());
}

TEST(DeviceSampler, WithoutNvmlStillSamplesCpu) {
  SamplerOptions o;
  o.interval_ms = 10;
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  DeviceSampler sampler(o);
  EXPECT_EQ(sampler.gpu_status().rfind("no NVML: /nonexistent/libnvidia-ml.so.1", 0), 0u)
      << sampler.gpu_status();
  sampler.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(35));
  sampler.stop();
  std::vector<DeviceSample> samples = sampler.samples();
  ASSERT_GE(samples.size(), 1u);
  for (const DeviceSample& s : samples) {
    EXPECT_TRUE(s.gpus.empty());
    EXPECT_GT(s.cpu.process_rss_bytes, 0);
    EXPECT_GE(s.cpu.per_core_util_pct.size(), 1u);
    EXPECT_GE(s.cpu.util_pct, 0.0);
    EXPECT_LE(s.cpu.util_pct, 100.0);
  }
}

TEST(DeviceSampler, GpuSamplingOffSaysSo) {
  SamplerOptions o;
  o.sample_gpus = false;
  DeviceSampler sampler(o);
  EXPECT_EQ(sampler.gpu_status(), "GPU sampling off");
  EXPECT_TRUE(sampler.sample_now().gpus.empty());
}

TEST(DeviceSampler, SampleNowReadsOnceWithoutThread) {
  SamplerOptions o;
  o.nvml_library = kFakeNvml;
  DeviceSampler sampler(o);
  DeviceSample s = sampler.sample_now();
  EXPECT_FALSE(sampler.is_running());
  EXPECT_EQ(s.gpus.size(), 2u);
  EXPECT_GT(s.cpu.process_rss_bytes, 0);
  EXPECT_GE(s.t_s, 0.0);
  EXPECT_TRUE(sampler.samples().empty());  // one-shot readings are not recorded
}

TEST(DeviceSampler, RestartClearsEarlierSamples) {
  SamplerOptions o;
  o.interval_ms = 5;
  o.sample_gpus = false;
  DeviceSampler sampler(o);
  sampler.start();
  sampler.start();  // no-op while running
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  sampler.stop();
  ASSERT_FALSE(sampler.samples().empty());
  sampler.start();
  sampler.stop();
  EXPECT_TRUE(sampler.samples().empty());
}

}  // namespace
}  // namespace saturate

namespace saturate {
namespace {

// Records the order of what a sink receives.
class OrderSink : public TelemetrySink {
 public:
  void on_step(const StepRecord& r) override { events.push_back("step " + std::to_string(r.step)); }
  void on_device_sample(int64_t step, const DeviceSample& s) override {
    events.push_back("sample after " + std::to_string(step));
    samples.push_back(s);
  }
  void on_end() override { events.push_back("end"); }
  std::vector<std::string> events;
  std::vector<DeviceSample> samples;
};

}  // namespace

TEST(SampledSink, DeliversEveryReadingOnTheCallingThreadInStepOrder) {
  SamplerOptions o;
  o.interval_ms = 5;
  o.nvml_library = kFakeNvml;
  DeviceSampler sampler(o);
  OrderSink downstream;
  SampledSink sampled(sampler, downstream);
  sampler.start();
  sampled.on_begin(4);
  for (int64_t step = 0; step < 4; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    StepRecord r;
    r.step = step;
    sampled.on_step(r);
  }
  sampler.stop();
  sampled.on_end();
  // Every reading arrives, once, oldest first, and the end comes last.
  const std::vector<DeviceSample> all = sampler.samples();
  ASSERT_GE(all.size(), 4u);
  ASSERT_EQ(downstream.samples.size(), all.size());
  EXPECT_EQ(sampled.delivered(), all.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(downstream.samples[i].t_s, all[i].t_s);
  EXPECT_EQ(downstream.events.front(), "step 0");
  EXPECT_EQ(downstream.events.back(), "end");
  // A sample is labelled with the newest step before it.
  int64_t last_step = -1;
  for (const std::string& e : downstream.events) {
    if (e.rfind("step ", 0) == 0) last_step = std::stoll(e.substr(5));
    if (e.rfind("sample after ", 0) == 0) {
      EXPECT_EQ(std::stoll(e.substr(13)), last_step) << e;
    }
  }
}

TEST(JsonlSink, DeviceSampleLineHasCpuGpusAndNullForUnreported) {
  DeviceSample s;
  s.t_s = 1.5;
  s.cpu.util_pct = 42;
  s.cpu.per_core_util_pct = {40, 44};
  s.cpu.process_rss_bytes = 1 << 20;
  GpuSample g;
  g.index = 0;
  g.name = "Fake GPU";
  g.util_pct = 97;
  g.power_w = 250;
  g.energy_j = 1234.5;
  g.throttle_names = {"sw_power_cap"};
  s.gpus.push_back(g);
  const auto j = nlohmann::json::parse(JsonlSink::sample_line(7, s));
  EXPECT_EQ(j["type"], "device_sample");
  EXPECT_EQ(j["step"], 7);
  EXPECT_EQ(j["t_s"], 1.5);
  EXPECT_EQ(j["cpu"]["util_pct"], 42);
  EXPECT_EQ(j["cpu"]["per_core_util_pct"].size(), 2u);
  EXPECT_EQ(j["cpu"]["process_rss_bytes"], 1 << 20);
  ASSERT_EQ(j["gpus"].size(), 1u);
  EXPECT_EQ(j["gpus"][0]["util_pct"], 97);
  EXPECT_EQ(j["gpus"][0]["energy_j"], 1234.5);
  EXPECT_TRUE(j["gpus"][0]["temperature_c"].is_null());
  EXPECT_TRUE(j["gpus"][0]["mem_used_bytes"].is_null());
  EXPECT_EQ(j["gpus"][0]["throttle_reasons"][0], "sw_power_cap");
}

}  // namespace saturate
