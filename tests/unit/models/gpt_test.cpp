// SPDX-License-Identifier: Apache-2.0
// The GPT language models: the same loss as a Python PyTorch GPT given the same weights, causal,
// recomputation that changes nothing, PaLM's FLOPs, and the inputs it refuses.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/core/temp_folder.h"
#include "saturate/models/model.h"

namespace saturate {
namespace {

const ModelInputs kText{{16}, 257, true};
const char* kSmall = "gpt-mini:layers=2,heads=2,width=32,context=16";

at::Tensor token_loss(const at::Tensor& logits, const at::Tensor& y) {
  return torch::nn::functional::cross_entropy(logits.flatten(0, 1), y.flatten());
}

void write_raw(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}

}  // namespace

TEST(Gpt, Issue18_GivesThePythonGptsLossForTheSameWeightsAndBatch) {
  if (std::string(SATURATE_TEST_PYTHON).empty()) GTEST_SKIP() << "no Python in this build";
  torch::manual_seed(3);
  auto m = make_model(kSmall, kText);
  m->train(false);
  const at::Tensor x = torch::randint(257, {4, 16}, torch::kLong);
  const at::Tensor y = torch::randint(257, {4, 16}, torch::kLong);
  const double loss = token_loss(m->forward(x), y).item<double>();
  TempFolder dir("saturate-gpt", "test");
  nlohmann::json params = nlohmann::json::array();
  int i = 0;
  for (const auto& [name, t] : m->named_parameters()) {
    const std::string file = "p" + std::to_string(i++) + ".bin";
    write_raw(dir.path() + "/" + file, t.detach().to(at::kFloat));
    params.push_back({{"name", name}, {"shape", t.sizes().vec()}, {"file", file}});
  }
  write_raw(dir.path() + "/tokens.bin", x);
  write_raw(dir.path() + "/targets.bin", y);
  const nlohmann::json manifest = {
      {"config", {{"vocab", 257}, {"layers", 2}, {"heads", 2}, {"width", 32}, {"context", 16}}},
      {"params", params},
      {"batch", {4, 16}},
      {"loss", loss}};
  std::ofstream(dir.path() + "/manifest.json") << manifest.dump();
  const std::string cmd = std::string("cd '") + SATURATE_SOURCE_DIR +
                          "' && PYTHONDONTWRITEBYTECODE=1 timeout -k 5 120 '" +
                          SATURATE_TEST_PYTHON + "' tests/python/fixtures/gpt_torch.py check '" +
                          dir.path() + "' > '" + dir.path() + "/out' 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(dir.path() + "/out");
  std::ostringstream out;
  out << in.rdbuf();
  EXPECT_EQ(status, 0) << out.str();
  // The loss is not that of uniform guessing: the weights matter to both sides.
  EXPECT_GT(std::abs(loss - std::log(257.0)), 1e-4) << out.str();
}

TEST(Gpt, Issue18_ATokenDoesNotSeeTheTokensAfterIt) {
  torch::manual_seed(1);
  auto m = make_model(kSmall, kText);
  m->train(false);
  at::Tensor x = torch::randint(257, {2, 16}, torch::kLong);
  const at::Tensor before = m->forward(x);
  ASSERT_EQ(before.sizes(), (std::vector<int64_t>{2, 16, 257}));
  x.index_put_({torch::indexing::Slice(), 10}, (x.index({torch::indexing::Slice(), 10}) + 1) % 257);
  const at::Tensor after = m->forward(x);
  EXPECT_TRUE(torch::allclose(before.slice(1, 0, 10), after.slice(1, 0, 10)));
  EXPECT_FALSE(torch::allclose(before.slice(1, 10), after.slice(1, 10)));
}

TEST(Gpt, Issue18_RecomputedBlocksGiveTheSameGradients) {
  torch::manual_seed(2);
  auto m = make_model("gpt-mini:layers=3,heads=2,width=32,context=16,dropout=0.1", kText);
  const at::Tensor x = torch::randint(257, {2, 16}, torch::kLong);
  const at::Tensor y = torch::randint(257, {2, 16}, torch::kLong);
  auto grads = [&] {
    for (auto& p : m->parameters()) p.mutable_grad() = at::Tensor();
    torch::manual_seed(9);  // the same dropout masks
    token_loss(m->forward(x), y).backward();
    std::vector<at::Tensor> g;
    for (auto& p : m->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const auto plain = grads();
  for (int64_t segments : {1, 2, 3}) {
    ASSERT_TRUE(m->set_recompute_segments(segments));
    const auto again = grads();
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_TRUE(torch::allclose(again[i], plain[i], 1e-5, 1e-6)) << segments << " segments, " << i;
  }
  EXPECT_TRUE(m->set_recompute_segments(10));
  EXPECT_EQ(m->recompute_segments(), 3);
}

TEST(Gpt, Issue18_CountsFlopsByPalmsFormulaAndTiesTheOutputToTheEmbedding) {
  auto m = make_model("gpt-small", {{256}, 65, true});
  // nanoGPT's character model: 6 layers of 12·384² (+ biases and norms), 65 × 384 tokens tied.
  const int64_t n = count_parameters(*m);
  const int64_t wpe = 256 * 384;
  const int64_t per_layer = 12 * 384 * 384 + 13 * 384;
  EXPECT_EQ(n, 6 * per_layer + 65 * 384 + wpe + 2 * 384);
  // Forward is a third of PaLM's 6N + 12·L·H·Q·T per token (N without position embeddings).
  EXPECT_EQ(m->forward_flops_per_sample(), 256 * (2 * (n - wpe) + 4 * 6 * 384 * 256));
}

TEST(Gpt, Issue18_RefusesWhatItCannotTake) {
  auto message = [](const std::string& spec, const ModelInputs& in) {
    try {
      make_model(spec, in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("gpt-mini", {{512}, 257, true}).find("above gpt-mini's context of 256"),
            std::string::npos);
  EXPECT_NE(message("gpt-mini", {{1, 28, 28}, 10, false}).find("needs text data"),
            std::string::npos);
  EXPECT_NE(message("mlp", kText).find("takes images, not text"), std::string::npos);
  EXPECT_NE(message("gpt-mini:width=30,heads=4", kText).find("not a multiple"), std::string::npos);
  EXPECT_NE(message("gpt-mini:depth=3", kText).find("unknown option 'depth'"), std::string::npos);
  EXPECT_NE(message("gpt-mini:layers=0", kText).find("layers"), std::string::npos);
  auto m = make_model(kSmall, kText);
  EXPECT_THROW(m->forward(torch::zeros({2, 17}, torch::kLong)), Error);
  EXPECT_THROW(m->forward(torch::zeros({2, 1, 4, 4})), Error);
}

}  // namespace saturate
