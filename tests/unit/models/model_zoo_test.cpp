// SPDX-License-Identifier: Apache-2.0
#include <sys/stat.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/models/model.h"
#include "testing/temp_dir.h"
#include "testing/error_of.h"

namespace saturate {
namespace {

const ModelInputs kFmnist{{1, 28, 28}, 10};

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string expect_error(const std::string& spec, const ModelInputs& inputs = kFmnist) {
  return testing::error_of([&] { make_model(spec, inputs); });
}

}  // namespace

TEST(ModelZoo, FmnistCnnHasTheSpecifiedLayers) {
  auto m = make_model("fmnist-cnn", kFmnist);
  // conv1 32·9+32, conv2 64·32·9+64, fc1 3136·128+128, fc2 128·10+10
  EXPECT_EQ(count_parameters(*m), 320 + 18496 + 401536 + 1290);
  at::Tensor out = m->forward(torch::zeros({3, 1, 28, 28}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{3, 10}));
  // 2·(9·32·784) + 2·(32·9·64·196) + 2·(3136·128) + 2·(128·10)
  EXPECT_EQ(m->forward_flops_per_sample(), 451584 + 7225344 + 802816 + 2560);
}

TEST(ModelZoo, MlpFlattensAnyShape) {
  auto m = make_model("mlp", {{3, 8, 8}, 5});
  EXPECT_EQ(m->forward(torch::zeros({2, 3, 8, 8})).sizes(), (std::vector<int64_t>{2, 5}));
}

TEST(ModelZoo, MlpDeepHasTwelveHiddenBlocks) {
  auto m = make_model("mlp-deep", kFmnist);
  // 784·512+512, 11 × (512·512+512), 512·10+10
  EXPECT_EQ(count_parameters(*m), 401920 + 11 * 262656 + 5130);
  EXPECT_EQ(m->forward(torch::zeros({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(m->forward_flops_per_sample(), 2 * (784 * 512 + 11 * 512 * 512 + 512 * 10));
}

TEST(ModelZoo, TrainEvalModeRoundTrips) {
  auto m = make_model("mlp", kFmnist);
  m->train(false);
  EXPECT_FALSE(m->is_training());
  m->train(true);
  EXPECT_TRUE(m->is_training());
}

TEST(ModelZoo, UnknownNameSuggestsTheClosestBuiltIn) {
  EXPECT_NE(expect_error("fmnist-cn").find("did you mean 'fmnist-cnn'"), std::string::npos);
}

TEST(ModelZoo, RejectsShapesAModelCannotTake) {
  EXPECT_NE(expect_error("fmnist-cnn", {{784}, 10}).find("fmnist-cnn takes images"),
            std::string::npos);
  EXPECT_NE(expect_error("mlp", {{1, 28, 28}, 1}).find("at least 2 classes"), std::string::npos);
  EXPECT_NE(expect_error("mlp", {{1, 0, 28}, 10}).find("non-positive"), std::string::npos);
}

TEST(TorchScriptModel, LoadsAndRunsTheFixture) {
  const std::string path = testing::fixtures_dir() + "/tiny_cnn.pt";
  if (!exists(path)) GTEST_SKIP() << "fixture " << path << " was not generated";
  auto m = make_model(path, kFmnist);
  EXPECT_EQ(m->name(), "torchscript:" + path);
  EXPECT_GT(count_parameters(*m), 0);
  EXPECT_GT(m->state_tensors().size(), m->parameters().size());  // batch-norm buffers
  EXPECT_EQ(m->forward(torch::zeros({4, 1, 28, 28})).sizes(), (std::vector<int64_t>{4, 10}));
}

TEST(TorchScriptModel, CannotRecomputeSegments) {
  const std::string path = testing::fixtures_dir() + "/tiny_cnn.pt";
  if (!exists(path)) GTEST_SKIP() << "fixture " << path << " was not generated";
  auto m = make_model(path, kFmnist);
  EXPECT_FALSE(m->set_recompute_segments(2));
  EXPECT_EQ(m->recompute_segments(), 0);
}

TEST(TorchScriptModel, WrongOutputShapeIsAClearError) {
  const std::string path = testing::fixtures_dir() + "/bad_output.pt";
  if (!exists(path)) GTEST_SKIP() << "fixture " << path << " was not generated";
  auto m = make_model("torchscript:" + path, kFmnist);
  try {
    m->forward(torch::zeros({2, 1, 28, 28}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected [2, 10]"), std::string::npos) << e.what();
  }
}

TEST(TorchScriptModel, MissingOrCorruptFileIsAClearError) {
  EXPECT_NE(expect_error("/no/such/model.pt").find("no such file"), std::string::npos);
  const std::string junk = testing::fixtures_dir() + "/not_a_model.pt";
  if (!exists(junk)) GTEST_SKIP() << "fixture " << junk << " was not generated";
  EXPECT_NE(expect_error(junk).find("not a loadable TorchScript file"), std::string::npos);
}

}  // namespace saturate
