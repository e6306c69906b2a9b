// SPDX-License-Identifier: Apache-2.0
#pragma once
// One training step's output and gradients, for comparing a recomputed model with a plain one.

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/models/model.h"

namespace saturate::testing {

struct StepGrads {
  at::Tensor out;
  std::vector<at::Tensor> params;  ///< undefined where a parameter got no grad
};

/// Clears the grads, seeds the RNG (dropout), runs forward, cross-entropy and backward.
inline StepGrads train_step_grads(Model& model, const at::Tensor& x, const at::Tensor& y,
                                  uint64_t seed) {
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
  torch::manual_seed(seed);
  at::Tensor out = model.forward(x);
  torch::nn::functional::cross_entropy(out, y).backward();
  StepGrads g{out.detach(), {}};
  for (auto& p : model.parameters())
    g.params.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return g;
}

/// Every output and grad within `tol` (max abs diff, printed on failure).
inline void expect_same_grads(const StepGrads& got, const StepGrads& want, double tol,
                              const std::string& what) {
  const double out_diff = (got.out - want.out).abs().max().item<double>();
  EXPECT_LE(out_diff, tol) << what << ": output max abs diff " << out_diff;
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (size_t i = 0; i < want.params.size(); ++i) {
    ASSERT_TRUE(got.params[i].defined()) << what << ": no grad for parameter " << i;
    const double diff = (got.params[i] - want.params[i]).abs().max().item<double>();
    EXPECT_LE(diff, tol) << what << ": parameter " << i << " grad max abs diff " << diff;
  }
}

}  // namespace saturate::testing
