// SPDX-License-Identifier: Apache-2.0
#pragma once
// In-memory image-classification datasets: a whole split held as one uint8 tensor, loaded from
// MNIST-layout IDX folders by a short spec ("fashion-mnist", "mnist", "idx:DIR").
//
//   saturate::DatasetSplits d = saturate::load_dataset("fashion-mnist");
//   // d.train.inputs: uint8 [60000, 1, 28, 28], d.train.targets: int64 [60000]

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace saturate {

/// One split, entirely in host memory.
struct TensorDataset {
  at::Tensor inputs;   ///< uint8 [N, C, H, W], raw pixels 0..255 (IDX images get C = 1)
  at::Tensor targets;  ///< int64 [N], class indices in [0, num_classes)
  int64_t num_classes = 0;
  std::string name;  ///< e.g. "fashion-mnist/train"
  /// N; 0 when `inputs` is undefined.
  int64_t size() const;
  /// {C, H, W}; empty when `inputs` is undefined.
  std::vector<int64_t> sample_shape() const;
};

struct DatasetSplits {
  TensorDataset train, test;
  /// Mean and (population) standard deviation of the train pixels scaled to [0, 1], for
  /// BatchIteratorOptions. normalize_std is 1.0 if the train pixels are all equal.
  double normalize_mean = 0.0, normalize_std = 1.0;
  /// One line, e.g. "fashion-mnist (/usr/share/datasets/fashion-mnist): 60000 train, 10000 test,
  /// 1x28x28, 10 classes".
  std::string description;
};

/// Loads both splits named by `spec`:
///   "fashion-mnist"  /usr/share/datasets/fashion-mnist, or $SATURATE_FASHION_MNIST_DIR if set
///   "mnist"          /usr/share/datasets/mnist
///   "idx:DIR"        any folder with train-images-idx3-ubyte, train-labels-idx1-ubyte,
///                    t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each optionally .gz
/// Throws saturate::Error ("data: ...") for an unknown spec (with a did-you-mean), a missing
/// folder or split files (listed by name), unreadable IDX files, images that are not 3-dim uint8,
/// labels that are not 1-dim uint8, image/label counts that differ (both files and counts named),
/// train/test image sizes that differ, or labels spanning fewer than 2 classes.
/// num_classes is the largest label in either split plus one.
DatasetSplits load_dataset(const std::string& spec);

/// The accepted spec forms, for help text and did-you-mean: "fashion-mnist", "mnist", "idx:DIR".
std::vector<std::string> dataset_spec_examples();

}  // namespace saturate
