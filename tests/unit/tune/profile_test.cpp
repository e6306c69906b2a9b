// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/profile.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "saturate/data/loader.h"
#include "saturate/data/training_input.h"
#include "saturate/telemetry/telemetry_sink.h"

namespace saturate {
namespace {

TrainingInput small_input() {
  InputOptions in;
  in.data_spec = "synthetic:1,8,8,4,256";
  return open_training_input(in, /*cuda_device=*/-1);
}

ProfileOptions small_options() {
  ProfileOptions o;
  o.model = "mlp";
  o.data_spec = "synthetic:1,8,8,4,256";
  o.threads = 1;
  o.train.batch_size = 16;
  o.train.steps = 8;
  o.train.timing_warmup_steps = 2;
  o.window_steps = 3;
  o.sampler.interval_ms = 50;
  return o;
}

TEST(Profile, OneProcessRunMeasuresPhasesComputeAndHostMemory) {
  const TrainingInput input = small_input();
  const ProfileOptions o = small_options();
  Loader loader(*input.source, input.loader_options(o.train.batch_size, o.train.seed, 0, 2));
  MemorySink extra;
  bool ran_after = false;
  ProfileJob job(input, loader, c10::Device(c10::kCPU), DeviceProbe{});
  job.sink = &extra;
  job.after_run = [&] { ran_after = true; };
  const Profile p = run_profile_job(o, job);
  EXPECT_EQ(p.model, "mlp");
  EXPECT_EQ(p.steps, 8);
  EXPECT_EQ(p.records.size(), 8u);
  EXPECT_EQ(extra.records().size(), 8u) << "the caller's sink sees every step";
  EXPECT_TRUE(ran_after);
  EXPECT_FALSE(p.train.evaluate) << "a profile never evaluates";
  EXPECT_EQ(p.throughput.windows, 2);  // 6 steady steps in windows of 3
  EXPECT_GT(p.phases.step_ms, 0);
  ASSERT_EQ(p.ranks.size(), 1u);
  EXPECT_DOUBLE_EQ(p.ranks[0].step_ms, p.phases.step_ms);
  EXPECT_GT(p.train_flops_per_sample, 0);
  EXPECT_GT(p.mfu_peak_flops, 0) << "the CPU's GEMM rate is measured";
  EXPECT_FALSE(std::isnan(p.mfu_pct));
  EXPECT_EQ(p.mfu_peak_precision, "fp32");
  EXPECT_GE(p.device_samples.count, 2) << "readings at both ends of the run";
  EXPECT_TRUE(std::isnan(p.scaling_efficiency())) << "one process: nothing to scale against";
}

TEST(Profile, StopsWhenTold) {
  const TrainingInput input = small_input();
  const ProfileOptions o = small_options();
  Loader loader(*input.source, input.loader_options(o.train.batch_size, o.train.seed, 0, 2));
  std::atomic<bool> stop{true};
  ProfileJob job(input, loader, c10::Device(c10::kCPU), DeviceProbe{});
  job.stop = &stop;
  const Profile p = run_profile_job(o, job);
  EXPECT_TRUE(p.is_interrupted);
  EXPECT_EQ(p.steps, 0);
}

TEST(Profile, LoaderAloneCountsBatchesAcrossEpochs) {
  const TrainingInput input = small_input();
  Loader loader(*input.source, input.loader_options(/*batch_size=*/64, /*seed=*/0, 0, 2));
  const LoaderProfile p = run_loader_profile(loader, /*batches=*/10, "synthetic", /*threads=*/1);
  EXPECT_EQ(p.batches, 10) << "256 samples are 4 batches an epoch: the loader starts new ones";
  EXPECT_EQ(p.batch_size, 64);
  EXPECT_GT(p.samples_per_s, 0);
  EXPECT_FALSE(p.is_interrupted);
}

}  // namespace
}  // namespace saturate
