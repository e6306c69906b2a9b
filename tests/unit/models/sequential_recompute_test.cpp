// SPDX-License-Identifier: Apache-2.0
// SequentialModel::set_recompute_segments: any segmentation trains exactly like none.
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/models/model.h"
#include "unit/models/grad_step.h"

namespace saturate {

TEST(SequentialRecompute, AnySegmentCountGivesTheSameGradsAsNone) {
  // mlp-deep has dropout in every block, so this also checks the RNG replay per segment.
  torch::manual_seed(3);
  auto model = make_model("mlp-deep", {{1, 8, 8}, 10});
  const at::Tensor x = torch::randn({4, 1, 8, 8});
  const at::Tensor y = torch::randint(10, {4});
  const auto plain = testing::train_step_grads(*model, x, y, /*seed=*/11);
  for (int64_t segments : {1, 5, 38}) {  // whole model, uneven runs, one per child
    ASSERT_TRUE(model->set_recompute_segments(segments));
    testing::expect_same_grads(testing::train_step_grads(*model, x, y, /*seed=*/11), plain,
                               /*tol=*/1e-6, std::to_string(segments) + " segments");
  }
}

TEST(SequentialRecompute, ClampsToTheNumberOfChildrenAndTurnsOff) {
  auto m = make_model("mlp-deep", {{16}, 10});
  EXPECT_EQ(m->recompute_segments(), 0);
  EXPECT_TRUE(m->set_recompute_segments(3));
  EXPECT_EQ(m->recompute_segments(), 3);
  EXPECT_TRUE(m->set_recompute_segments(1000));
  EXPECT_EQ(m->recompute_segments(), 38);  // flatten, 12 x (linear, relu, dropout), linear
  EXPECT_TRUE(m->set_recompute_segments(0));
  EXPECT_EQ(m->recompute_segments(), 0);
  EXPECT_THROW(m->set_recompute_segments(-1), Error);
}

TEST(SequentialRecompute, EvalAndNoGradForwardsMatchThePlainModel) {
  torch::manual_seed(5);
  auto m = make_model("mlp-deep", {{16}, 10});
  const at::Tensor x = torch::randn({3, 16});
  m->train(false);
  const at::Tensor plain = m->forward(x);
  m->set_recompute_segments(4);
  EXPECT_TRUE(m->forward(x).equal(plain));
  m->train(true);
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  const at::Tensor ckpt_train = m->forward(x);
  EXPECT_FALSE(ckpt_train.requires_grad());
  m->set_recompute_segments(0);
  torch::manual_seed(8);
  EXPECT_TRUE(m->forward(x).equal(ckpt_train));
}

}  // namespace saturate
