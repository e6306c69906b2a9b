// SPDX-License-Identifier: Apache-2.0
// CUDA-event phase timing on a real GPU. Every test skips without CUDA.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/models/model.h"
#include "saturate/telemetry/phase_timer.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/train/trainer.h"
#include "testing/pattern_dataset.h"
#include "testing/sgd_steps.h"

namespace saturate {
namespace {

#define SATURATE_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "requires CUDA"

TEST(CudaPhaseTimer, DeviceWorkLandsInThePhaseThatQueuedIt) {
  SATURATE_REQUIRE_CUDA();
  const c10::Device cuda("cuda:0");
  const at::Tensor a = torch::randn({2048, 2048}, cuda);
  auto timer = make_cuda_phase_timer(0);
  EXPECT_EQ(timer->clock_name(), "cuda_events");
  timer->begin();
  timer->mark(Phase::kDataWait);
  at::Tensor b = a;
  for (int i = 0; i < 20; ++i) b = torch::mm(b, a).div_(2048.0);
  timer->mark(Phase::kForward);  // the host gets here long before the device does
  const int64_t ticket = timer->finish();
  StepRecord r;
  timer->read(ticket, r);  // waits
  EXPECT_GT(r.forward_ms, 10 * r.data_wait_ms);
  EXPECT_NEAR(phase_sum_ms(r), r.step_ms, 1e-3 * r.step_ms + 1e-3);
}

TEST(CudaPhaseTimer, TrainerOnCudaTimesWithEventsAndPhasesSumToTheStep) {
  SATURATE_REQUIRE_CUDA();
  const auto data = testing::make_pattern_splits(512, 64);
  TrainOptions o;
  o.batch_size = 64;
  o.steps = 20;
  o.evaluate = false;
  seed_everything(0);
  auto model = make_model("fmnist-cnn", {data.train.sample_shape(), data.train.num_classes});
  Trainer trainer(*model, o, c10::Device("cuda:0"));
  EXPECT_EQ(trainer.phase_timer().clock_name(), "cuda_events");
  MemorySink sink;
  trainer.fit(data, &sink);
  ASSERT_EQ(sink.records().size(), 20u);
  for (const StepRecord& r : sink.records()) {
    EXPECT_GT(r.forward_ms, 0.0);
    EXPECT_GT(r.backward_ms, 0.0);
    EXPECT_NEAR(phase_sum_ms(r), r.step_ms, 0.02 * r.step_ms + 1e-3);
    EXPECT_TRUE(std::isfinite(r.loss));
  }
}

// Issue 14: the channels-last path on a GPU (cuDNN's NHWC kernels): the same step as NCHW to
// fp32 reordering (TF32 off), the conv weights NHWC on the device.
TEST(TrainerCuda, Issue14_ChannelsLastTakesTheSameStepOnTheGpu) {
  SATURATE_REQUIRE_CUDA();
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  const auto data = testing::make_pattern_splits(256, 32);
  auto steps = [&](MemoryFormat format, bool* nhwc_weights) {
    TrainOptions o = testing::sgd_steps(/*batch_size=*/48, /*steps=*/2, /*lr=*/0.1);
    o.memory_format = format;
    seed_everything(5);
    auto model = make_model("fmnist-cnn", {data.train.sample_shape(), data.train.num_classes});
    Trainer trainer(*model, o, c10::Device("cuda:0"));
    trainer.fit(data);
    std::vector<at::Tensor> out;
    for (const auto& p : model->parameters()) {
      if (nhwc_weights && p.dim() == 4 && p.size(1) > 1)
        *nhwc_weights = p.is_cuda() && p.is_contiguous(at::MemoryFormat::ChannelsLast);
      out.push_back(p.detach().to(at::kCPU).contiguous());
    }
    return out;
  };
  bool nhwc = false;
  const auto a = steps(MemoryFormat::kContiguous, nullptr);
  const auto b = steps(MemoryFormat::kChannelsLast, &nhwc);
  EXPECT_TRUE(nhwc);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    EXPECT_LE(diff, 1e-4 * std::max(1.0, a[i].abs().max().item<double>())) << "parameter " << i;
  }
}

}  // namespace
}  // namespace saturate
