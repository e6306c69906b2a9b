// SPDX-License-Identifier: Apache-2.0
#pragma once
// In-memory image-classification datasets: a whole split held as one uint8 tensor, loaded by a
// short spec from MNIST-layout IDX folders ("fashion-mnist", "mnist", "idx:DIR"), CIFAR binary
// folders ("cifar10:DIR", "cifar100:DIR"), .npy arrays ("npy:DIR"), record files
// ("records:DIR") or folders of JPEG/PNG images ("folder:DIR[@HxWxC]").
//
//   saturate::DatasetSplits d = saturate::load_dataset("fashion-mnist");
//   // d.train.inputs: uint8 [60000, 1, 28, 28], d.train.targets: int64 [60000]

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "saturate/data/sample_source.h"

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
  /// Held-out training samples that judge changes (open_training_input with a val fraction);
  /// empty otherwise. Never trained on.
  TensorDataset validation;
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
///   "cifar10:DIR"    CIFAR-10 binary: data_batch_1.bin .. data_batch_5.bin, test_batch.bin
///   "cifar100:DIR"   CIFAR-100 binary: train.bin, test.bin (fine labels, 100 classes)
///   "npy:DIR"        train_x.npy, train_y.npy, test_x.npy, test_y.npy: uint8 images shaped
///                    [N, H, W] or [N, C, H, W] and integer labels shaped [N] (npy_reader.h)
///   "records:DIR"    train.rec and test.rec, saturate record files (record_file.h)
///   "folder:DIR"     DIR/train/<class>/*.{jpg,jpeg,png} and DIR/test/<class>/...: every image
///                    decoded and resized to 32x32 RGB, or to H x W with C (1 or 3) channels
///                    for "folder:DIR@HxWxC"; labels follow the sorted train class folders
///                    (image_folder.h)
/// Throws saturate::Error ("data: ...") for an unknown spec (with a did-you-mean, or the spec
/// that fits when it names a folder), a missing folder or split files (listed by name), image
/// and label counts that differ (both files and counts named), train/test image sizes that
/// differ, an empty split, or labels spanning fewer than 2 classes. IDX images must be 3-dim
/// uint8 and labels 1-dim uint8. Reader errors name the file and the record or sample: IDX ones
/// come prefixed "data: <spec>: ", CIFAR, .npy and record-file ones start "cifar: ", "npy: " or
/// "records: ", image ones "image: <file> (sample N): ". num_classes is 10 or 100 for CIFAR,
/// the header's for record files, the train class folders' count for image folders, and the
/// largest label in either split plus one otherwise.
DatasetSplits load_dataset(const std::string& spec);

/// What training reads. `train` is the training split as a SampleSource; for "folder:" and
/// "records:" specs it reads lazily (each image decoded, each record copied out of the mapping,
/// when the loader asks for it) and `splits.train` stays empty, so a data set larger than memory
/// trains; for the other formats it is `splits.train` in memory. `splits.test` is loaded as
/// load_dataset() loads it. The normalisation statistics of a streamed split come from at most
/// 4096 of its samples spread evenly over it. Throws what load_dataset() throws for the spec and
/// the test split; a bad training image surfaces when it is read.
struct OpenedDataset {
  DatasetSplits splits;
  std::unique_ptr<SampleSource> train;
  bool streamed = false;  ///< `train` reads from the files, not from `splits.train`
};
OpenedDataset open_dataset(const std::string& spec);

/// The accepted spec forms, for help text and did-you-mean: "fashion-mnist", "mnist", "idx:DIR",
/// "cifar10:DIR", "cifar100:DIR", "npy:DIR", "records:DIR", "folder:DIR".
std::vector<std::string> dataset_spec_examples();

}  // namespace saturate
