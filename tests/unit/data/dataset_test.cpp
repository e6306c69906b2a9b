// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/dataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/data/idx_reader.h"
#include "testing/temp_dir.h"
#include "testing/error_of.h"

namespace saturate {
namespace {

using testing::TempDir;

using testing::contains;
using testing::error_of;

IdxArray images(int64_t count, int64_t height, int64_t width) {
  IdxArray a;
  a.dims = {count, height, width};
  a.data.resize(static_cast<size_t>(a.numel()));
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<uint8_t>(i % 256);
  return a;
}

IdxArray labels(int64_t count, int64_t num_classes) {
  IdxArray a;
  a.dims = {count};
  a.data.resize(static_cast<size_t>(count));
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<uint8_t>(i % num_classes);
  return a;
}

// An MNIST-layout folder: 6 train and 4 test 3x2 images, 3 classes; train files gzipped.
void write_mnist_folder(const TempDir& dir) {
  write_idx(dir.file("train-images-idx3-ubyte.gz"), images(6, 3, 2), /*gzip=*/true);
  write_idx(dir.file("train-labels-idx1-ubyte.gz"), labels(6, 3), /*gzip=*/true);
  write_idx(dir.file("t10k-images-idx3-ubyte"), images(4, 3, 2), /*gzip=*/false);
  write_idx(dir.file("t10k-labels-idx1-ubyte"), labels(4, 3), /*gzip=*/false);
}

TEST(Dataset, LoadsIdxFolderWithPlainAndGzipFiles) {
  TempDir dir;
  write_mnist_folder(dir);
  const DatasetSplits d = load_dataset("idx:" + dir.path());

  EXPECT_EQ(d.train.size(), 6);
  EXPECT_EQ(d.test.size(), 4);
  EXPECT_EQ(d.train.sample_shape(), (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(d.train.inputs.scalar_type(), torch::kUInt8);
  EXPECT_EQ(d.train.targets.scalar_type(), torch::kInt64);
  EXPECT_EQ(d.train.num_classes, 3);
  EXPECT_EQ(d.test.num_classes, 3);
  EXPECT_EQ(d.train.inputs[1][0][2][1].item<int64_t>(), 6 + 5);  // sample 1, pixel (2, 1)
  EXPECT_EQ(d.train.targets[4].item<int64_t>(), 1);

  const std::string label = dir.path().substr(dir.path().rfind('/') + 1);
  EXPECT_EQ(d.train.name, label + "/train");
  EXPECT_EQ(d.test.name, label + "/test");
  EXPECT_EQ(d.description, label + " (" + dir.path() + "): 6 train, 4 test, 1x3x2, 3 classes");
}

TEST(Dataset, ComputesNormalisationFromTrainPixels) {
  TempDir dir;
  write_mnist_folder(dir);
  const DatasetSplits d = load_dataset("idx:" + dir.path());
  const torch::Tensor pixels = d.train.inputs.to(torch::kFloat64) / 255.0;
  EXPECT_NEAR(d.normalize_mean, pixels.mean().item<double>(), 1e-12);
  const double population_std = (pixels - pixels.mean()).pow(2).mean().sqrt().item<double>();
  EXPECT_NEAR(d.normalize_std, population_std, 1e-12);
}

TEST(Dataset, RejectsTwoDimensionalLabels) {
  TempDir dir;
  write_mnist_folder(dir);
  IdxArray bad = labels(6, 3);
  bad.dims = {3, 2};
  write_idx(dir.file("train-labels-idx1-ubyte.gz"), bad, /*gzip=*/true);
  EXPECT_TRUE(contains(error_of([&] { load_dataset("idx:" + dir.path()); }),
                       dir.file("train-labels-idx1-ubyte.gz") +
                           ": expected labels as a 1-dimensional uint8 IDX array, found a "
                           "2-dimensional uint8 array"));
}

TEST(Dataset, RejectsOneDimensionalImages) {
  TempDir dir;
  write_mnist_folder(dir);
  write_idx(dir.file("t10k-images-idx3-ubyte"), labels(24, 7), /*gzip=*/false);
  EXPECT_TRUE(contains(
      error_of([&] { load_dataset("idx:" + dir.path()); }),
      dir.file("t10k-images-idx3-ubyte") + ": expected images as a 3-dimensional uint8 IDX array"));
}

TEST(Dataset, RejectsImageLabelCountMismatch) {
  TempDir dir;
  write_mnist_folder(dir);
  write_idx(dir.file("t10k-labels-idx1-ubyte"), labels(5, 3), /*gzip=*/false);
  EXPECT_TRUE(
      contains(error_of([&] { load_dataset("idx:" + dir.path()); }),
               "data: image and label counts differ: " + dir.file("t10k-images-idx3-ubyte") +
                   " has 4 images, " + dir.file("t10k-labels-idx1-ubyte") + " has 5 labels"));
}

TEST(Dataset, RejectsFewerThanTwoClasses) {
  TempDir dir;
  write_mnist_folder(dir);
  write_idx(dir.file("train-labels-idx1-ubyte.gz"), labels(6, 1), /*gzip=*/true);
  write_idx(dir.file("t10k-labels-idx1-ubyte"), labels(4, 1), /*gzip=*/false);
  EXPECT_TRUE(contains(error_of([&] { load_dataset("idx:" + dir.path()); }),
                       "classification needs at least 2 classes"));
}

TEST(Dataset, RejectsTrainAndTestImageSizesThatDiffer) {
  TempDir dir;
  write_mnist_folder(dir);
  write_idx(dir.file("t10k-images-idx3-ubyte"), images(4, 2, 3), /*gzip=*/false);
  EXPECT_TRUE(
      contains(error_of([&] { load_dataset("idx:" + dir.path()); }), "data: image sizes differ"));
}

TEST(Dataset, ListsMissingSplitFilesByName) {
  TempDir dir;
  write_mnist_folder(dir);
  ASSERT_EQ(std::remove(dir.file("train-labels-idx1-ubyte.gz").c_str()), 0);
  ASSERT_EQ(std::remove(dir.file("t10k-images-idx3-ubyte").c_str()), 0);
  EXPECT_TRUE(contains(error_of([&] { load_dataset("idx:" + dir.path()); }),
                       "lacks train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz]"));
}

TEST(Dataset, RejectsMissingFolder) {
  TempDir dir;
  const std::string spec = "idx:" + dir.file("nowhere");
  EXPECT_TRUE(contains(error_of([&] { load_dataset(spec); }),
                       "data: " + spec + ": folder " + dir.file("nowhere") + " not found"));
  EXPECT_TRUE(contains(error_of([&] { load_dataset("idx:"); }), "needs a folder"));
}

TEST(Dataset, PrefixesReaderErrorsWithSpec) {
  TempDir dir;
  write_mnist_folder(dir);
  {
    // Trailing garbage after a valid label file: the reader's error, with the spec in front.
    std::FILE* f = std::fopen(dir.file("t10k-labels-idx1-ubyte").c_str(), "ab");
    ASSERT_NE(f, nullptr);
    std::fputc(9, f);
    std::fclose(f);
  }
  const std::string spec = "idx:" + dir.path();
  EXPECT_TRUE(
      contains(error_of([&] { load_dataset(spec); }),
               "data: " + spec + ": " + dir.file("t10k-labels-idx1-ubyte") + ": 1 trailing bytes"));
}

TEST(Dataset, SuggestsClosestSpecForUnknownName) {
  EXPECT_TRUE(contains(error_of([] { load_dataset("fashion-minst"); }),
                       "data: unknown dataset 'fashion-minst'; did you mean 'fashion-mnist'?"));
  EXPECT_TRUE(contains(error_of([] { load_dataset("cifar10"); }),
                       "expected one of: fashion-mnist, mnist, idx:DIR"));
  TempDir dir;
  EXPECT_TRUE(contains(error_of([&] { load_dataset(dir.path()); }), "use idx:" + dir.path()));
}

TEST(Dataset, FashionMnistFolderComesFromEnvironment) {
  TempDir dir;
  write_mnist_folder(dir);
  ::setenv("SATURATE_FASHION_MNIST_DIR", dir.path().c_str(), /*overwrite=*/1);
  const DatasetSplits d = load_dataset("fashion-mnist");
  ::unsetenv("SATURATE_FASHION_MNIST_DIR");
  EXPECT_EQ(d.train.name, "fashion-mnist/train");
  EXPECT_EQ(d.description.rfind("fashion-mnist (" + dir.path() + "): 6 train", 0), 0u);
}

// The one test that reads the installed data set; skipped where it is absent.
TEST(Dataset, LoadsInstalledFashionMnist) {
  const char* kDir = "/usr/share/datasets/fashion-mnist";
  struct stat info {};
  if (::stat(kDir, &info) != 0) GTEST_SKIP() << kDir << " is absent";
  ::unsetenv("SATURATE_FASHION_MNIST_DIR");
  const DatasetSplits d = load_dataset("fashion-mnist");
  EXPECT_EQ(d.train.size(), 60000);
  EXPECT_EQ(d.test.size(), 10000);
  EXPECT_EQ(d.train.sample_shape(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(d.train.num_classes, 10);
  EXPECT_NEAR(d.normalize_mean, 0.2860, 1e-3);  // the usual published Fashion-MNIST statistics
  EXPECT_NEAR(d.normalize_std, 0.3530, 1e-3);
  EXPECT_EQ(d.description,
            "fashion-mnist (/usr/share/datasets/fashion-mnist): 60000 train, 10000 test, "
            "1x28x28, 10 classes");
}

}  // namespace
}  // namespace saturate
