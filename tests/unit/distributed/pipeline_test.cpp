// SPDX-License-Identifier: Apache-2.0
// Pipeline stages (issue 19) in one process: the even split and its bad inputs, a model's layers
// as stages sharing its parameters, and a pipeline of one stage, whose micro-batches must give
// the gradient of the whole batch. Several stages run in tests/distributed (dist.pipeline_*).
#include "saturate/distributed/pipeline.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include "saturate/core/error.h"
#include "saturate/device/device_memory.h"
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
  // An epoch's last batch of 3, fewer samples than M = 4: one micro-batch a sample, the same
  // gradient as the 3 samples' mean loss.
  for (at::Tensor& p : model->parameters()) p.mutable_grad().zero_();
  const at::Tensor small = mean_loss(model->forward(x.slice(0, 0, 3)), y.slice(0, 0, 3));
  small.backward();
  std::vector<at::Tensor> want_small;
  for (at::Tensor& p : model->parameters()) {
    want_small.push_back(p.grad().clone());
    p.mutable_grad().zero_();
  }
  const PipelineStepStats st3 = pipe.forward_backward(x.slice(0, 0, 3), y.slice(0, 0, 3));
  EXPECT_NEAR(st3.loss, small.item<double>(), 1e-6);
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(params[i].grad().allclose(want_small[i], 1e-5, 1e-7)) << i;
  EXPECT_NE(testing::error_of([&] { PipelineStage bad(*g, *stage, {0, PipelineSchedule::kGPipe}); })
                .find("--micro-batches must be at least 1"),
            std::string::npos);
}

std::vector<LayerCost> costs_of(const std::vector<double>& ms, int64_t param_bytes = 0) {
  std::vector<LayerCost> c;
  for (double v : ms) c.push_back({v, 0, param_bytes});
  return c;
}

TEST(Pipeline, ABalancedSplitMinimisesTheSlowestStage) {
  // One heavy first layer: the even split puts it with three more (11 ms against 4); balanced,
  // it stands alone and the slowest stage is 8 ms.
  const auto costs = costs_of({8, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(split_layers_evenly(8, 2), (Spans{{0, 4}, {4, 8}}));
  const StageSplit s = split_layers_balanced(costs, 2, 0, 2.0);
  EXPECT_EQ(s.spans, (Spans{{0, 1}, {1, 8}}));
  EXPECT_DOUBLE_EQ(s.slowest_ms, 8);
  EXPECT_EQ(s.ms, (std::vector<double>{8, 7}));
  const StageSplit three = split_layers_balanced(costs_of({2, 2, 2, 2, 2, 2}), 3, 0, 2.0);
  EXPECT_EQ(three.spans, (Spans{{0, 2}, {2, 4}, {4, 6}}));
}

TEST(Pipeline, ABalancedSplitKeepsEachStageWithinTheMemoryLimit) {
  // 100 bytes of parameters a layer, × 2 for SGD: 200 a layer. With 600 bytes a stage, the
  // time-best split (1 | 7 layers) does not fit; 2 stages of 4 layers would need 800 each, so
  // 3 stages do: the fastest split that fits.
  const auto costs = costs_of({8, 1, 1, 1, 1, 1, 1, 1}, 100);
  EXPECT_NE(testing::error_of([&] { split_layers_balanced(costs, 2, 600, 2.0); })
                .find("no split of the model's 8 layers into 2 stages fits"),
            std::string::npos);
  const StageSplit s = split_layers_balanced(costs, 3, 600, 2.0);
  ASSERT_EQ(s.spans.size(), 3u);
  for (int64_t b : s.bytes) EXPECT_LE(b, 600);
  EXPECT_EQ(s.spans, (Spans{{0, 2}, {2, 5}, {5, 8}}));
  EXPECT_DOUBLE_EQ(s.slowest_ms, 9);
}

TEST(Pipeline, ProfilingALayerChainFindsItsConvolutionsTheHeaviest) {
  const ModelInputs in{{1, 28, 28}, 10, false};
  torch::manual_seed(3);
  auto model = make_model("fmnist-cnn", in);
  const auto costs = profile_layers(*model, torch::randn({64, 1, 28, 28}), 3);
  ASSERT_EQ(costs.size(), 10u);
  // The convolutions and pooling at 28×28 and 14×14 (layers 0-5) are the work; flatten and the
  // ReLU on 128 features (6, 8) move almost nothing (measured: 0.9-4.4 ms against 0.02).
  std::string shown;
  for (const LayerCost& c : costs) shown += " " + std::to_string(c.ms);
  for (size_t heavy = 0; heavy < 6; ++heavy)
    for (size_t light : {6, 8}) EXPECT_GT(costs[heavy].ms, 5 * costs[light].ms) << shown;
  // So two balanced stages cut inside the front, where the even split gives the first five
  // layers to stage 0.
  const StageSplit s = split_layers_balanced(costs, 2, 0, 2.0);
  EXPECT_LT(s.spans[0].second, 5) << shown;
  EXPECT_LT(s.slowest_ms, std::max(costs[0].ms + costs[1].ms + costs[2].ms + costs[3].ms + costs[4].ms,
                                   costs[5].ms + costs[6].ms + costs[7].ms + costs[8].ms + costs[9].ms)) << shown;
  EXPECT_EQ(costs[0].activation_bytes, 64 * 32 * 28 * 28 * 4);
  EXPECT_EQ(costs[3].param_bytes, (32 * 64 * 9 + 64) * 4);
  EXPECT_EQ(costs[1].param_bytes, 0);
  for (at::Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined()) << "profiling leaves no gradients";
}

// The split's memory model needs what a layer's forward leaves for its backward, not only its
// output: a GPT block saves its LayerNorms' and projections' inputs, the attention's output and
// the MLP's 4 × wider hidden layer. Measured through the CPU's counting allocator it is several
// times the block's output (which is all the profile has without a DeviceMemory).
TEST(Pipeline, Issue19_ProfileMeasuresWhatEachLayerHoldsForItsBackward) {
  const ModelInputs in{{16}, 50, true};
  torch::manual_seed(3);
  auto model = make_model("gpt-mini:layers=1,heads=2,width=64,context=16", in);
  const at::Tensor x = torch::randint(0, 50, {8, 16});
  const int64_t output = 8 * 16 * 64 * 4;
  const auto unmeasured = profile_layers(*model, x, 1);
  ASSERT_EQ(unmeasured.size(), 3u);
  EXPECT_EQ(unmeasured[1].activation_bytes, output);
  auto memory = make_device_memory(c10::Device(c10::kCPU), 0);
  const auto measured = profile_layers(*model, x, 1, memory.get());
  EXPECT_GT(measured[1].activation_bytes, 5 * output) << measured[1].activation_bytes;
  EXPECT_GE(measured[0].activation_bytes, output);
  for (at::Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined()) << "profiling leaves no gradients";
}

}  // namespace
}  // namespace saturate
