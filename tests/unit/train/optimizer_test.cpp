// SPDX-License-Identifier: Apache-2.0
// AdamW as the Trainer builds it runs one fused kernel per step; it must stay the update and the
// state of LibTorch's own AdamW, step after step, through a save and load into the plain one,
// and where it falls back (AMSGrad) or a parameter has no gradient.
#include "saturate/train/optimizer.h"

#include <sstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace saturate {
namespace {

std::vector<at::Tensor> make_params(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> p = {torch::randn({33, 17}), torch::randn({257}), torch::randn({1})};
  for (auto& t : p) t.requires_grad_(true);
  return p;
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& p) {
  std::vector<at::Tensor> out;
  for (const auto& t : p) out.push_back(t.detach().clone().requires_grad_(true));
  return out;
}

// The same random gradients (large and small: the second moment then spans orders) on both.
void set_grads(std::vector<at::Tensor>& a, std::vector<at::Tensor>& b, int step) {
  torch::manual_seed(1000 + step);
  for (size_t i = 0; i < a.size(); ++i) {
    const at::Tensor g = torch::randn_like(a[i]) * std::pow(10.0, static_cast<double>(i) - 1.0);
    a[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = g.clone();
  }
}

double max_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

TrainOptions adamw(double lr, double wd) {
  TrainOptions o;
  o.optimizer = OptimizerKind::kAdamW;
  o.lr = lr;
  o.weight_decay = wd;
  return o;
}

}  // namespace

TEST(Optimizer, Issue18_FusedAdamWTakesLibTorchsAdamWStepsAndState) {
  std::vector<at::Tensor> fused_p = make_params(1), plain_p = copies(fused_p);
  auto fused = make_optimizer(adamw(1e-2, 0.1), fused_p);
  ASSERT_NE(dynamic_cast<torch::optim::AdamW*>(fused.get()), nullptr);
  torch::optim::AdamW plain(plain_p, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  const at::Tensor start = fused_p[0].detach().clone();
  for (int step = 0; step < 30; ++step) {
    set_grads(fused_p, plain_p, step);
    fused->step();
    plain.step();
  }
  EXPECT_GT((fused_p[0] - start).abs().max().item<double>(), 0.05);  // it did move
  EXPECT_LT(max_diff(fused_p, plain_p), 1e-5);
  const auto& s = static_cast<const torch::optim::AdamWParamState&>(
      *fused->state().at(fused_p[1].unsafeGetTensorImpl()));
  EXPECT_EQ(s.step(), 30);

  // Saved from the fused one, loaded into LibTorch's AdamW: both go on the same way.
  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    fused->save(archive);
    archive.save_to(saved);
  }
  std::vector<at::Tensor> resumed_p = copies(fused_p);
  torch::optim::AdamW resumed(resumed_p, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  {
    torch::serialize::InputArchive archive;
    archive.load_from(saved);
    resumed.load(archive);
  }
  for (int step = 30; step < 35; ++step) {
    set_grads(fused_p, resumed_p, step);
    fused->step();
    resumed.step();
  }
  EXPECT_LT(max_diff(fused_p, resumed_p), 1e-5);
}

TEST(Optimizer, Issue18_FusedAdamWSkipsAParameterWithoutGrad) {
  std::vector<at::Tensor> fused_p = make_params(2), plain_p = copies(fused_p);
  auto fused = make_optimizer(adamw(1e-2, 0.0), fused_p);
  torch::optim::AdamW plain(plain_p, torch::optim::AdamWOptions(1e-2).weight_decay(0.0));
  set_grads(fused_p, plain_p, 0);
  fused_p[2].mutable_grad() = at::Tensor();
  plain_p[2].mutable_grad() = at::Tensor();
  const at::Tensor frozen = fused_p[2].detach().clone();
  fused->step();
  plain.step();
  EXPECT_TRUE(torch::equal(fused_p[2].detach(), frozen));
  EXPECT_EQ(fused->state().count(fused_p[2].unsafeGetTensorImpl()), 0u);
  EXPECT_LT(max_diff(fused_p, plain_p), 1e-6);
}

TEST(Optimizer, Issue18_AmsgradIsNotFusedAndTakesThePlainStep) {
  std::vector<at::Tensor> fused_p = make_params(3), plain_p = copies(fused_p);
  auto fused = make_optimizer(adamw(1e-2, 0.0), fused_p);
  static_cast<torch::optim::AdamWOptions&>(fused->param_groups()[0].options()).amsgrad(true);
  torch::optim::AdamW plain(plain_p, torch::optim::AdamWOptions(1e-2).weight_decay(0.0).amsgrad(true));
  for (int step = 0; step < 6; ++step) {
    set_grads(fused_p, plain_p, step);
    fused->step();
    plain.step();
  }
  EXPECT_EQ(max_diff(fused_p, plain_p), 0.0);
  const auto& s = static_cast<const torch::optim::AdamWParamState&>(
      *fused->state().at(fused_p[0].unsafeGetTensorImpl()));
  EXPECT_TRUE(s.max_exp_avg_sq().defined());
}

}  // namespace saturate
