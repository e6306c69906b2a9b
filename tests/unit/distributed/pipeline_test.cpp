// SPDX-License-Identifier: Apache-2.0
// Pipeline stages (issue 19) in one process: the even split and its bad inputs, a model's layers
// as stages sharing its parameters, and a pipeline of one stage, whose micro-batches must give
// the gradient of the whole batch. Several stages run in tests/distributed (dist.pipeline_*).
#include "saturate/distributed/pipeline.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include "saturate/core/error.h"
#include "saturate/distributed/process_group.h"
#include "saturate/models/model.h"
#include "saturate/train/trainer.h"
#include "testing/error_of.h"

namespace saturate {
namespace {

using Spans = std::vector<std::pair<int64_t, int64_t>>;

TEST(Pipeline, SplitsLayersIntoNearEqualContiguousStages) {
  EXPECT_EQ(split_layers_evenly(10, 4), (Spans{{0, 3}, {3, 6}, {6, 8}, {8, 10}}));
  EXPECT_EQ(split_layers_evenly(4, 4), (Spans{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(split_layers_evenly(5, 1), (Spans{{0, 5}}));
  EXPECT_NE(testing::error_of([] { split_layers_evenly(3, 4); }).find("only 3 layers"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { split_layers_evenly(0, 2); }).find("cannot be split"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { split_layers_evenly(4, 0); }).find("at least 1"),
            std::string::npos);
  EXPECT_EQ(parse_pipeline_schedule("1f1b"), PipelineSchedule::k1F1B);
  EXPECT_EQ(to_string(parse_pipeline_schedule("gpipe")), "gpipe");
  EXPECT_NE(testing::error_of([] { parse_pipeline_schedule("zero-bubble"); }).find("gpipe, 1f1b"),
            std::string::npos);
}

TEST(Pipeline, AStageIsTheModelsOwnLayersUnderTheirNames) {
  const ModelInputs in{{1, 28, 28}, 10, false};
  auto model = make_model("fmnist-cnn", in);
  ASSERT_EQ(model->pipeline_layers(), 10);
  auto stage = model->pipeline_stage(3, 6);  // conv, ReLU, pool
  ASSERT_NE(stage, nullptr);
  const auto named = stage->named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "3.weight");
  bool shared = false;
  for (const auto& [n, p] : model->named_parameters())
    if (n == "3.weight") shared = p.is_same(named[0].second);
  EXPECT_TRUE(shared) << "a stage must train the model's own parameters, not a copy";
  EXPECT_EQ(stage->forward(torch::randn({2, 32, 28, 28})).sizes(), (std::vector<int64_t>{2, 64, 14, 14}));
  EXPECT_NE(testing::error_of([&] { model->pipeline_stage(6, 3); }).find("[6, 3)"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { model->pipeline_stage(0, 11); }).find("10 layers"),
            std::string::npos);
}

TEST(Pipeline, OneStagesMicroBatchesGiveTheWholeBatchsGradient) {
  const DistEnv env;  // a world of one
  auto g = init_process_group(env, DistBackend::kAuto, c10::Device("cpu"), std::chrono::seconds(10));
  const ModelInputs in{{1, 28, 28}, 10, false};
  torch::manual_seed(3);
  auto model = make_model("fmnist-cnn", in);
  // 30 samples in 4 micro-batches: 8, 8, 7, 7, each weighted by its share.
  const at::Tensor x = torch::randn({30, 1, 28, 28}), y = torch::randint(0, 10, {30});
  const at::Tensor whole = mean_loss(model->forward(x), y);
  whole.backward();
  std::vector<at::Tensor> want;
  for (at::Tensor& p : model->parameters()) {
    want.push_back(p.grad().clone());
    p.mutable_grad().zero_();
  }
  auto stage = model->pipeline_stage(0, model->pipeline_layers());
  PipelineStage pipe(*g, *stage, {4, PipelineSchedule::k1F1B});
  const PipelineStepStats st = pipe.forward_backward(x, y);
  EXPECT_NEAR(st.loss, whole.item<double>(), 1e-6);
  EXPECT_EQ(st.most_held, 1) << "1F1B on the last stage holds one micro-batch at a time";
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(params[i].grad().allclose(want[i], 1e-5, 1e-7)) << i;
  EXPECT_NE(testing::error_of([&] { pipe.forward_backward(x.slice(0, 0, 3), y.slice(0, 0, 3)); })
                .find("more than the batch of 3"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { PipelineStage bad(*g, *stage, {0, PipelineSchedule::kGPipe}); })
                .find("--micro-batches must be at least 1"),
            std::string::npos);
}

}  // namespace
}  // namespace saturate
