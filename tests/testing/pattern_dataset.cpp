// SPDX-License-Identifier: Apache-2.0
#include "testing/pattern_dataset.h"

#include <torch/torch.h>

namespace saturate::testing {

TensorDataset make_pattern_dataset(int64_t n, int64_t classes, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor noise = at::randint(0, 64, {n, 1, 28, 28}, gen, at::kLong);
  at::Tensor labels = at::randint(0, classes, {n}, gen, at::kLong);
  auto acc = labels.accessor<int64_t, 1>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = acc[i];
    const int64_t row = (k / 4) * 7, col = (k % 4) * 7;
    noise[i].slice(1, row, row + 7).slice(2, col, col + 7).fill_(220);
  }
  TensorDataset d;
  d.inputs = noise.to(at::kByte);
  d.targets = labels;
  d.num_classes = classes;
  d.name = "pattern";
  return d;
}

DatasetSplits make_pattern_splits(int64_t n_train, int64_t n_test, int64_t classes) {
  DatasetSplits s;
  s.train = make_pattern_dataset(n_train, classes, /*seed=*/1);
  s.test = make_pattern_dataset(n_test, classes, /*seed=*/2);
  s.normalize_mean = s.train.inputs.to(at::kFloat).div(255.0).mean().item<double>();
  s.normalize_std = s.train.inputs.to(at::kFloat).div(255.0).std().item<double>();
  s.description = "pattern";
  return s;
}

}  // namespace saturate::testing
