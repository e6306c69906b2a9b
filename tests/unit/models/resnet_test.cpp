// SPDX-License-Identifier: Apache-2.0
// resnet18-cifar: architecture, FLOPs and recompute segments. Slow (ctest label `slow`):
// building the 11M-parameter model alone takes ~0.1 s and a 32x32 forward ~1 GFLOP per sample.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/models/model.h"
#include "testing/error_of.h"
#include "unit/models/grad_step.h"

namespace saturate {
namespace {

const ModelInputs kCifar{{3, 32, 32}, 10};
const ModelInputs kFmnist{{1, 28, 28}, 10};

std::string expect_error(const std::string& spec, const ModelInputs& inputs) {
  return testing::error_of([&] { make_model(spec, inputs); });
}

}  // namespace

TEST(Resnet18Cifar, HasTheReferenceParameterCountAndFlops) {
  auto m = make_model("resnet18-cifar", kCifar);
  // The figure published for the CIFAR ResNet-18 (kuangliu/pytorch-cifar) with 10 classes.
  EXPECT_EQ(count_parameters(*m), 11173962);
  // Per sample at 32x32, in multiply-adds (MACs):
  //   stem 3→64 3x3 at 32x32                         3·64·9·1024 =   1,769,472
  //   stage 1: 4 convs 64→64 3x3 at 32x32           4·64·64·9·1024 = 150,994,944
  //   stages 2-4, each (the spatial side halves as the channels double, so all three match):
  //     first conv (stride 2) + 3 convs + 1x1 shortcut  18,874,368 + 3·37,748,736 + 2,097,152
  //                                                  = 134,217,728, times 3 = 402,653,184
  //   linear 512→10                                                     5,120
  //   total 555,422,720 MACs — the "0.56 GFLOPs" usually quoted for this network counts MACs;
  //   saturate counts 2 FLOPs per MAC, so 1,110,845,440. Batch norm, ReLU, adds and pooling are
  //   not counted.
  EXPECT_EQ(m->forward_flops_per_sample(), 2LL * 555422720);
}

TEST(Resnet18Cifar, TakesAnyChannelCountAndSmallImages) {
  auto cifar = make_model("resnet18-cifar", kCifar);
  cifar->train(false);
  EXPECT_EQ(cifar->forward(torch::zeros({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 10}));
  auto gray = make_model("resnet18-cifar", kFmnist);
  gray->train(false);
  EXPECT_EQ(gray->forward(torch::zeros({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  // Only the stem sees the channel count: 9·64 weights per input channel.
  EXPECT_EQ(count_parameters(*cifar) - count_parameters(*gray), 2 * 9 * 64);
  EXPECT_NE(expect_error("resnet18-cifar", {{3, 7, 32}, 10}).find("at least 8x8"),
            std::string::npos);
  EXPECT_NE(expect_error("resnet18-cifar", {{784}, 10}).find("takes images"), std::string::npos);
}

TEST(Resnet18Cifar, SegmentsFallOnBlockBoundariesAndKeepTheGrads) {
  torch::manual_seed(3);
  auto model = make_model("resnet18-cifar", {{3, 8, 8}, 10});
  EXPECT_TRUE(model->set_recompute_segments(100));
  EXPECT_EQ(model->recompute_segments(), 12);  // stem, 8 blocks, pool, flatten, linear
  const at::Tensor x = torch::randn({2, 3, 8, 8});
  const at::Tensor y = torch::randint(10, {2});
  ASSERT_TRUE(model->set_recompute_segments(0));
  const auto plain = testing::train_step_grads(*model, x, y, /*seed=*/11);
  // Batch norm normalises with batch statistics in training, so the recomputation's extra
  // running-stat update does not change the grads.
  ASSERT_TRUE(model->set_recompute_segments(4));
  testing::expect_same_grads(testing::train_step_grads(*model, x, y, /*seed=*/11), plain,
                             /*tol=*/1e-5, "4 segments");
}

}  // namespace saturate
