// SPDX-License-Identifier: Apache-2.0
#pragma once
// The gradient noise a test knows exactly: |G|² and tr(Σ) of a model's mean cross-entropy
// gradient over a whole split, from every sample's own gradient (no estimator involved), and a
// model small enough to take them all.
//
//   auto model = make_linear_model({data.train.sample_shape(), data.train.num_classes});
//   NoiseTruth t = exact_noise(*model, data.train, data.normalize_mean, data.normalize_std);

#include <cstdint>
#include <memory>

#include "saturate/data/dataset.h"
#include "saturate/models/model.h"

namespace saturate::testing {

struct NoiseTruth {
  double grad_sqr = 0;  ///< |G|², G the mean gradient over the split
  double trace = 0;     ///< tr(Σ), Σ the per-sample gradients' (population) covariance
  double phi() const { return trace / grad_sqr; }
};

/// The truth at the model's current weights, in training mode, with the inputs normalised as
/// the batch iterator does.
NoiseTruth exact_noise(Model& model, const TensorDataset& data, double mean, double std);

/// Flatten, then one linear layer: a classifier with no BatchNorm or dropout, whose gradient
/// noise comes from the samples alone.
std::unique_ptr<Model> make_linear_model(const ModelInputs& in);

/// The estimator tests' problem: the pattern data (4096 training samples, 8 classes) with every
/// third training label wrong, so that the gradient neither vanishes nor is all signal.
DatasetSplits make_noisy_pattern_splits();
/// The same with two in every three training labels moved to one of the other classes: far
/// more noise against the same signal, so a larger φ.
DatasetSplits make_very_noisy_pattern_splits();
/// A linear model on those splits after 10 plain-SGD steps (seeded: the same on every rank).
/// Train it further with a learning rate too small to move it (1e-30, no momentum or decay) and
/// every step samples one fixed gradient distribution, whose truth exact_noise gives.
std::unique_ptr<Model> warmed_linear_model(const DatasetSplits& data);

}  // namespace saturate::testing
