// SPDX-License-Identifier: Apache-2.0
#include "saturate/models/recompute.h"

#include <string>
#include <vector>

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace saturate {
namespace {
namespace nn = torch::nn;

// The tensors a training step produces, for comparing a recomputed run with a plain one.
struct StepResult {
  at::Tensor out;
  at::Tensor input_grad;
  std::vector<at::Tensor> param_grads;
  at::Tensor next_random;  ///< the first draw after backward: the RNG stream must not shift
};

// A block with dropout between two linears, so a wrong RNG replay changes the gradients.
nn::Sequential make_block() {
  torch::manual_seed(7);
  return nn::Sequential(nn::Linear(16, 32), nn::ReLU(), nn::Dropout(0.5), nn::Linear(32, 8));
}

StepResult run_step(nn::Sequential& net, const at::Tensor& input, bool use_recompute) {
  for (auto& p : net->parameters()) p.mutable_grad() = at::Tensor();
  at::Tensor x = input.detach().clone().requires_grad_(input.requires_grad());
  torch::manual_seed(1234);
  at::Tensor out = use_recompute
                       ? recompute([&](const at::Tensor& in) { return net->forward(in); }, x)
                       : net->forward(x);
  // A fixed, non-uniform upstream gradient.
  const at::Tensor weight = torch::linspace(-1.0, 1.0, out.numel()).reshape(out.sizes());
  (out.to(at::kFloat) * weight).sum().backward();
  StepResult r;
  r.out = out.detach();
  r.input_grad = x.grad();
  for (auto& p : net->parameters())
    r.param_grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  r.next_random = torch::rand({4});
  return r;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double tol,
                  const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << " is undefined";
  ASSERT_TRUE(want.defined()) << what << " (reference) is undefined";
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(diff, tol) << what << ": max abs diff " << diff;
}

void expect_same_step(const StepResult& got, const StepResult& want, double tol) {
  expect_close(got.out, want.out, tol, "output");
  if (want.input_grad.defined()) expect_close(got.input_grad, want.input_grad, tol, "input grad");
  ASSERT_EQ(got.param_grads.size(), want.param_grads.size());
  for (size_t i = 0; i < want.param_grads.size(); ++i)
    expect_close(got.param_grads[i], want.param_grads[i], tol,
                 "grad of parameter " + std::to_string(i));
  expect_close(got.next_random, want.next_random, 0.0, "first random draw after backward");
}

// Turns bf16 CPU autocast on for a scope (generic per-device-type API; the per-device names
// are deprecated) and clears the cast cache on the way out, as torch.autocast's exit does.
class CpuAutocast {
 public:
  CpuAutocast() {
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
  }
  ~CpuAutocast() {
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
  }
};

}  // namespace

TEST(Recompute, MatchesPlainAutogradWithDropout) {
  nn::Sequential net = make_block();
  const at::Tensor x = torch::randn({4, 16}).requires_grad_(true);
  const StepResult plain = run_step(net, x, /*use_recompute=*/false);
  const StepResult ckpt = run_step(net, x, /*use_recompute=*/true);
  // Dropout really dropped something, so the replayed mask is what is being compared.
  EXPECT_GT((plain.param_grads[2] == 0).sum().item<int64_t>(), 0);
  expect_same_step(ckpt, plain, /*tol=*/1e-6);
}

TEST(Recompute, InputWithoutGradStillGivesParameterGrads) {
  nn::Sequential net = make_block();
  const at::Tensor x = torch::randn({4, 16});  // like a data batch
  const StepResult plain = run_step(net, x, /*use_recompute=*/false);
  const StepResult ckpt = run_step(net, x, /*use_recompute=*/true);
  EXPECT_FALSE(ckpt.input_grad.defined());
  expect_same_step(ckpt, plain, /*tol=*/1e-6);
}

TEST(Recompute, RecomputesUnderTheForwardsAutocastState) {
  nn::Sequential net = make_block();
  const at::Tensor x = torch::randn({4, 16}).requires_grad_(true);
  // Autocast covers only the forward; backward (and so the recomputation) runs outside it, and
  // the recomputation must re-enter bf16 on its own to produce the same gradients.
  auto autocast_step = [&](bool use_recompute) {
    for (auto& p : net->parameters()) p.mutable_grad() = at::Tensor();
    at::Tensor xi = x.detach().clone().requires_grad_(true);
    torch::manual_seed(99);
    at::Tensor out;
    {
      CpuAutocast autocast;
      out = use_recompute ? recompute([&](const at::Tensor& in) { return net->forward(in); }, xi)
                           : net->forward(xi);
    }
    EXPECT_EQ(out.scalar_type(), at::kBFloat16);
    out.to(at::kFloat).sum().backward();
    StepResult r;
    r.out = out.detach();
    r.input_grad = xi.grad();
    for (auto& p : net->parameters())
      r.param_grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    r.next_random = torch::rand({4});
    return r;
  };
  const StepResult plain = autocast_step(false);
  const StepResult ckpt = autocast_step(true);
  expect_same_step(ckpt, plain, /*tol=*/0.0);
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU)) << "backward leaked autocast state";
  EXPECT_TRUE(at::autocast::is_autocast_cache_enabled()) << "backward left the cast cache off";
}

TEST(Recompute, RunsTheSegmentOnceMoreInBackward) {
  nn::Linear lin(4, 4);
  int calls = 0;
  auto fn = [&](const at::Tensor& in) {
    ++calls;
    return lin(in);
  };
  at::Tensor y = recompute(fn, torch::randn({2, 4}));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(lin->weight.grad().defined());
}

TEST(Recompute, OutsideGradModeJustCallsTheSegment) {
  nn::Linear lin(4, 4);
  int calls = 0;
  auto fn = [&](const at::Tensor& in) {
    ++calls;
    return lin(in);
  };
  const at::Tensor x = torch::randn({2, 4}).requires_grad_(true);
  {
    torch::NoGradGuard no_grad;
    at::Tensor y = recompute(fn, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    expect_close(y, lin(x).detach(), 0.0, "no-grad output");
  }
  {
    c10::InferenceMode inference;
    EXPECT_FALSE(recompute(fn, x).requires_grad());
  }
  EXPECT_EQ(calls, 2);
}

TEST(Recompute, SegmentWithoutParametersOrGradInputIsHarmless) {
  at::Tensor y = recompute([](const at::Tensor& in) { return in * 2; }, torch::ones({3}));
  // The dummy edge makes the output require grad; backward recomputes and finds nothing to do.
  y.sum().backward();
  expect_close(y, torch::full({3}, 2.0), 0.0, "output");
}

}  // namespace saturate
