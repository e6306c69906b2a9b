// SPDX-License-Identifier: Apache-2.0
#include "testing/noise_truth.h"

#include <string>
#include <vector>

#include <torch/torch.h>

#include "saturate/models/sequential.h"
#include "saturate/train/trainer.h"
#include "testing/pattern_dataset.h"
#include "testing/sgd_steps.h"

namespace saturate::testing {

std::unique_ptr<Model> make_linear_model(const ModelInputs& in) {
  int64_t features = 1;
  for (int64_t d : in.sample_shape) features *= d;
  return make_sequential_model(
      "linear", torch::nn::Sequential(torch::nn::Flatten(),
                                      torch::nn::Linear(features, in.num_classes)));
}

NoiseTruth exact_noise(Model& model, const TensorDataset& data, double mean, double std) {
  std::vector<at::Tensor> params = model.parameters();
  std::vector<at::Tensor> sum;  // Σ g_i, in double
  for (const at::Tensor& p : params) sum.push_back(torch::zeros_like(p, torch::kDouble));
  double sum_sqr = 0;  // Σ |g_i|²
  const int64_t n = data.size();
  const at::Tensor inputs = data.inputs.to(torch::kFloat32).div(255.0).sub(mean).div(std);
  for (int64_t i = 0; i < n; ++i) {
    for (at::Tensor& p : params) p.mutable_grad() = at::Tensor();
    const at::Tensor logits = model.forward(inputs.slice(0, i, i + 1));
    torch::nn::functional::cross_entropy(logits, data.targets.slice(0, i, i + 1)).backward();
    for (size_t k = 0; k < params.size(); ++k) {
      const at::Tensor g = params[k].grad().to(torch::kDouble);
      sum[k] += g;
      sum_sqr += g.square().sum().item<double>();
    }
  }
  for (at::Tensor& p : params) p.mutable_grad() = at::Tensor();
  NoiseTruth t;
  for (const at::Tensor& s : sum) t.grad_sqr += (s / static_cast<double>(n)).square().sum().item<double>();
  t.trace = sum_sqr / static_cast<double>(n) - t.grad_sqr;
  return t;
}

DatasetSplits make_noisy_pattern_splits() {
  DatasetSplits data = make_pattern_splits(4096, 64, 8);
  const at::Tensor wrong = torch::arange(0, data.train.size(), 3);
  data.train.targets.index_put_({wrong}, (data.train.targets.index({wrong}) + 1) % 8);
  return data;
}

DatasetSplits make_very_noisy_pattern_splits() {
  DatasetSplits data = make_pattern_splits(4096, 64, 8);
  at::Tensor& y = data.train.targets;
  for (int64_t i = 0; i < data.train.size(); ++i)
    if (i % 3 != 0) y[i] = (y[i].item<int64_t>() + 1 + i % 7) % 8;
  return data;
}

std::unique_ptr<Model> warmed_linear_model(const DatasetSplits& data) {
  seed_everything(3);
  auto model = make_linear_model({data.train.sample_shape(), data.train.num_classes});
  Trainer warm(*model, sgd_steps(64, 10, 0.01), c10::Device("cpu"));
  warm.fit(data);
  return model;
}

}  // namespace saturate::testing
