// SPDX-License-Identifier: Apache-2.0
// Mixed precision on a real GPU: fp16 autocast, the GradScaler on CUDA tensors, and a bf16
// reference run against fp32. Every test skips without CUDA.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "saturate/device/probe.h"
#include "saturate/train/grad_scaler.h"
#include "saturate/train/precision.h"

namespace saturate {
namespace {

#define SATURATE_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "requires CUDA"

TEST(AutocastScopeCuda, Fp16ScopeRunsLinearInHalf) {
  SATURATE_REQUIRE_CUDA();
  const c10::Device cuda("cuda:0");
  torch::nn::Linear linear(16, 8);
  linear->to(cuda);
  const at::Tensor x = torch::randn({4, 16}, cuda);
  {
    AutocastScope amp(Precision::kFp16, c10::kCUDA);
    const at::Tensor y = linear(x);
    EXPECT_EQ(y.scalar_type(), at::kHalf);
    EXPECT_TRUE(y.is_cuda());
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(c10::kCUDA));
  EXPECT_EQ(linear(x).scalar_type(), at::kFloat);
}

TEST(GradScalerCuda, BacksOffOnInfAndGrowsAfterInterval) {
  SATURATE_REQUIRE_CUDA();
  const c10::Device cuda("cuda:0");
  at::Tensor w = torch::ones({8}, torch::TensorOptions().device(cuda).requires_grad(true));
  torch::optim::SGD sgd(std::vector<at::Tensor>{w}, torch::optim::SGDOptions(0.1));
  GradScalerOptions o;
  o.init_scale = 1024.0;
  o.growth_interval_steps = 3;
  GradScaler scaler(o);
  auto iterate = [&](double scaled_grad) {
    const at::Tensor scaled = scaler.scale(torch::ones({}, cuda));
    EXPECT_TRUE(scaled.is_cuda());
    w.mutable_grad() = torch::full({8}, scaled_grad, cuda);
    const bool stepped = scaler.step(sgd, {w});
    scaler.update();
    return stepped;
  };
  const at::Tensor before = w.detach().clone();
  EXPECT_FALSE(iterate(std::numeric_limits<double>::infinity()));
  EXPECT_TRUE(torch::equal(w.detach(), before));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 512.0);
  EXPECT_FALSE(iterate(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 256.0);
  EXPECT_TRUE(iterate(256.0));  // unscaled grad 1.0
  EXPECT_TRUE(torch::allclose(w.detach().cpu(), torch::full({8}, 0.9f)));
  EXPECT_TRUE(iterate(1.0));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 256.0);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  EXPECT_TRUE(iterate(1.0));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

// Full-batch SGD on the tiny MLP of the CPU reference test, on the GPU.
std::vector<double> train_tiny_mlp(Precision precision, int steps) {
  const c10::Device cuda("cuda:0");
  torch::manual_seed(7);
  const at::Tensor x = torch::randn({256, 32}).to(cuda);
  const at::Tensor y = x.matmul(torch::randn({32, 4}).to(cuda)).argmax(1);
  torch::nn::Sequential mlp(torch::nn::Linear(32, 64), torch::nn::ReLU(), torch::nn::Linear(64, 4));
  mlp->to(cuda);
  torch::optim::SGD sgd(mlp->parameters(), torch::optim::SGDOptions(0.2).momentum(0.9));
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    at::Tensor loss;
    {
      AutocastScope amp(precision, c10::kCUDA);
      loss = torch::nn::functional::cross_entropy(mlp->forward(x), y);
    }
    sgd.zero_grad();
    loss.backward();
    sgd.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

TEST(AutocastScopeCuda, Bf16TrainingTracksFp32OnTinyMlp) {
  SATURATE_REQUIRE_CUDA();
  const DeviceProbe probe = probe_devices();
  ASSERT_FALSE(probe.gpus.empty());
  if (!probe.gpus[0].has_bf16) GTEST_SKIP() << "requires native bf16 (compute capability >= 8)";
  constexpr int kSteps = 50;
  // The CPU reference run differs by 0.08% (bound 2%); cuBLAS bf16 kernels are not yet observed
  // here, so the bound is the looser 5% until a GPU run shows the real gap.
  constexpr double kFinalRelTol = 0.05;
  const std::vector<double> fp32 = train_tiny_mlp(Precision::kFp32, kSteps);
  const std::vector<double> bf16 = train_tiny_mlp(Precision::kBf16, kSteps);
  double max_abs = 0, max_rel = 0;
  for (size_t i = 0; i < fp32.size(); ++i) {
    const double abs_diff = std::abs(fp32[i] - bf16[i]);
    max_abs = std::max(max_abs, abs_diff);
    max_rel = std::max(max_rel, abs_diff / std::abs(fp32[i]));
  }
  const double final_rel = std::abs(fp32.back() - bf16.back()) / fp32.back();
  EXPECT_LT(final_rel, kFinalRelTol)
      << "final loss fp32 " << fp32.back() << " vs bf16 " << bf16.back()
      << "; over all steps max abs diff " << max_abs << ", max rel diff " << max_rel;
  EXPECT_LT(fp32.back(), 0.5 * fp32.front());
  EXPECT_LT(bf16.back(), 0.5 * bf16.front());
}

}  // namespace
}  // namespace saturate
