// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/oom_probe.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/device/cpu_budget.h"
#include "saturate/device/device_memory.h"
#include "saturate/models/model.h"
#include "saturate/train/trainer.h"
#include "testing/fake_device_memory.h"
#include "testing/pattern_dataset.h"

namespace saturate {
namespace {

struct BudgetGuard {
  ~BudgetGuard() { set_cpu_budget(0); }
};

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}

void expect_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i << " changed";
}

}  // namespace

TEST(ProbeOnce, ReportsFitsWithThePeakOfTheStep) {
  testing::FakeDeviceMemory mem(/*limit_bytes=*/1000);
  mem.allocate(100);
  const ProbeResult r = probe_once(
      [&] {
        mem.allocate(500);
        mem.free(500);
      },
      mem);
  EXPECT_EQ(r.outcome, ProbeOutcome::kFits);
  EXPECT_EQ(r.baseline_bytes, 100);
  EXPECT_EQ(r.peak_memory_bytes, 600);
}

TEST(ProbeOnce, ReturnsOutOfMemoryAsAValue) {
  testing::FakeDeviceMemory mem(/*limit_bytes=*/1000);
  const ProbeResult r = probe_once([&] { mem.allocate(5000); }, mem);
  EXPECT_EQ(r.outcome, ProbeOutcome::kOutOfMemory);
  EXPECT_NE(r.message.find("tried to allocate 5000"), std::string::npos) << r.message;
  EXPECT_EQ(to_string(r.outcome), "oom");
}

TEST(ProbeOnce, LetsEveryOtherErrorThrough) {
  testing::FakeDeviceMemory mem;
  EXPECT_THROW(probe_once([] { throw std::runtime_error("not memory"); }, mem),
               std::runtime_error);
  EXPECT_THROW(probe_once([] { TORCH_CHECK(false, "a shape error"); }, mem), c10::Error);
}

class TrainerProbe : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = testing::make_pattern_splits(512, 64);
    memory_ = make_device_memory(c10::Device("cpu"), 0);
    seed_everything(0);
    model_ = make_model("mlp", {data_.train.sample_shape(), data_.train.num_classes});
    TrainOptions o;
    o.batch_size = 32;
    o.steps = 3;
    o.evaluate = false;
    trainer_ = std::make_unique<Trainer>(*model_, o, c10::Device("cpu"), memory_.get());
  }
  DatasetSplits data_;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Trainer> trainer_;
  BudgetGuard guard_;
};

TEST_F(TrainerProbe, FitsAndLeavesTheModelAsItWas) {
  trainer_->fit(data_);  // optimizer state exists now
  const auto before = copies(model_->state_tensors());
  const ProbeResult r = trainer_->probe(256, data_);
  EXPECT_EQ(r.outcome, ProbeOutcome::kFits);
  EXPECT_GT(r.peak_memory_bytes, r.baseline_bytes + 256 * 784 * 4);  // at least the float batch
  expect_equal(before, model_->state_tensors());
  // The optimizer state was put back too: the next steps match a trainer that never probed.
}

TEST_F(TrainerProbe, PeakGrowsWithTheBatch) {
  const ProbeResult small = trainer_->probe(64, data_);
  const ProbeResult large = trainer_->probe(1024, data_);
  // At least the float input of the 960 extra samples; the fixed part (gradients, optimizer
  // state and its temporaries) is the same for both.
  EXPECT_GE((large.peak_memory_bytes - large.baseline_bytes) - (small.peak_memory_bytes - small.baseline_bytes),
            960 * 784 * 4);
}

TEST_F(TrainerProbe, OutOfMemoryUnderABudgetIsAValueAndRestoresEverything) {
  const ProbeResult fits = trainer_->probe(1024, data_);
  ASSERT_EQ(fits.outcome, ProbeOutcome::kFits);
  const auto before = copies(model_->state_tensors());
  const int64_t live = cpu_budget_stats().live_bytes;
  // Room for the input batch and half of the rest of the step: the failure comes mid-step.
  const int64_t input = 1024 * 784 * 4;
  set_cpu_budget(live + input + (fits.peak_memory_bytes - fits.baseline_bytes - input) / 2);
  const ProbeResult oom = trainer_->probe(1024, data_);
  EXPECT_EQ(oom.outcome, ProbeOutcome::kOutOfMemory);
  EXPECT_GT(oom.peak_memory_bytes, live + 1024 * 784 * 4);  // it got past the input
  set_cpu_budget(0);
  EXPECT_EQ(cpu_budget_stats().live_bytes, live);
  expect_equal(before, model_->state_tensors());
}

// Issue 3: 100 forced OOMs in one process, no crash, live bytes back to the baseline (±1 MiB),
// and a probe right after succeeds. Issue 14: cached bytes back to the baseline too.
TEST_F(TrainerProbe, Issue3_HundredOutOfMemoryProbesLeaveNothingBehind) {
  const ProbeResult small = trainer_->probe(64, data_);
  ASSERT_EQ(small.outcome, ProbeOutcome::kFits);
  const int64_t baseline = cpu_budget_stats().live_bytes;
  const int64_t cached_baseline = cpu_budget_stats().cached_bytes;
  // Room for batch 64 with half as much again to spare; batch 1024 fails part-way through.
  set_cpu_budget(baseline + (small.peak_memory_bytes - small.baseline_bytes) * 3 / 2);
  int ooms = 0;
  for (int i = 0; i < 100; ++i)
    ooms += trainer_->probe(1024, data_).outcome == ProbeOutcome::kOutOfMemory ? 1 : 0;
  EXPECT_EQ(ooms, 100);
  EXPECT_NEAR(static_cast<double>(cpu_budget_stats().live_bytes), static_cast<double>(baseline),
              1 << 20);
  // Issue 14: every probe empties the cache after itself, so the failed steps' blocks are gone.
  EXPECT_NEAR(static_cast<double>(cpu_budget_stats().cached_bytes),
              static_cast<double>(cached_baseline), 1 << 20);
  EXPECT_LE(cpu_budget_stats().reserved_bytes, cpu_budget_stats().limit_bytes + (1 << 20));
  EXPECT_EQ(trainer_->probe(64, data_).outcome, ProbeOutcome::kFits);  // under the same budget
}

}  // namespace saturate
