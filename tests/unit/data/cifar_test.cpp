// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/data/cifar_reader.h"
#include "saturate/data/dataset.h"
#include "testing/error_of.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;

// Pixel j of record i in a fixture; `seed` tells files apart.
uint8_t pixel(int seed, size_t i, size_t j) { return static_cast<uint8_t>(seed * 31 + i * 7 + j); }

// `count` records in the binary layout; fine labels come from `label_of`, CIFAR-100 coarse
// labels are fine / 5.
std::vector<uint8_t> cifar_bytes(CifarKind kind, size_t count,
                                 const std::function<int(size_t)>& label_of, int seed = 0) {
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < count; ++i) {
    const int label = label_of(i);
    if (kind == CifarKind::kCifar100) bytes.push_back(static_cast<uint8_t>(label / 5));
    bytes.push_back(static_cast<uint8_t>(label));
    for (size_t j = 0; j < static_cast<size_t>(kCifarImageBytes); ++j) {
      bytes.push_back(pixel(seed, i, j));
    }
  }
  return bytes;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// A CIFAR-10 folder: five training batches of 2 records (labels 0..9 in order) and a test batch
// of 3 records; pixel seeds are the batch number (test: 9).
void write_cifar10_folder(const TempDir& dir) {
  for (int b = 1; b <= 5; ++b) {
    write_bytes(dir.file("data_batch_" + std::to_string(b) + ".bin"),
                cifar_bytes(
                    CifarKind::kCifar10, 2,
                    [b](size_t i) { return static_cast<int>((b - 1) * 2 + i); }, b));
  }
  write_bytes(dir.file("test_batch.bin"),
              cifar_bytes(
                  CifarKind::kCifar10, 3, [](size_t i) { return 9 - i; }, 9));
}

TEST(CifarReader, ParsesCifar10RecordsChannelMajor) {
  const std::vector<uint8_t> bytes =
      cifar_bytes(CifarKind::kCifar10, 4, [](size_t i) { return static_cast<int>(i * 3); });
  ASSERT_EQ(bytes.size(), 4 * 3073u);
  const CifarRecords r = parse_cifar_records(bytes.data(), bytes.size(), CifarKind::kCifar10, "f");
  EXPECT_EQ(r.size(), 4);
  EXPECT_EQ(r.labels, (std::vector<int64_t>{0, 3, 6, 9}));
  ASSERT_EQ(r.pixels.size(), 4u * kCifarImageBytes);
  // Record 2, blue plane (channel 2), row 5, column 7: the byte 2*1024 + 5*32 + 7 of its image.
  const size_t j = 2 * 1024 + 5 * 32 + 7;
  EXPECT_EQ(r.pixels[2 * kCifarImageBytes + j], pixel(0, 2, j));
  EXPECT_EQ(r.pixels.back(), pixel(0, 3, kCifarImageBytes - 1));
}

TEST(CifarReader, UsesFineLabelsForCifar100) {
  const std::vector<uint8_t> bytes =
      cifar_bytes(CifarKind::kCifar100, 3, [](size_t i) { return static_cast<int>(97 + i); });
  ASSERT_EQ(bytes.size(), 3 * 3074u);
  ASSERT_EQ(bytes[0], 97 / 5);  // the coarse label really is in the file, and differs
  const CifarRecords r = parse_cifar_records(bytes.data(), bytes.size(), CifarKind::kCifar100, "f");
  EXPECT_EQ(r.labels, (std::vector<int64_t>{97, 98, 99}));
  EXPECT_EQ(r.pixels[kCifarImageBytes], pixel(0, 1, 0));  // pixels start after both label bytes
  EXPECT_EQ(cifar_num_classes(CifarKind::kCifar100), 100);
}

TEST(CifarReader, ReadsAndConcatenatesFilesInOrder) {
  TempDir dir;
  write_bytes(dir.file("a.bin"), cifar_bytes(
                                     CifarKind::kCifar10, 2, [](size_t) { return 4; }, 1));
  write_bytes(dir.file("b.bin"), cifar_bytes(
                                     CifarKind::kCifar10, 1, [](size_t) { return 8; }, 2));
  const CifarRecords r =
      read_cifar_files({dir.file("a.bin"), dir.file("b.bin")}, CifarKind::kCifar10);
  EXPECT_EQ(r.labels, (std::vector<int64_t>{4, 4, 8}));
  EXPECT_EQ(r.pixels[2 * kCifarImageBytes + 10], pixel(2, 0, 10));
}

TEST(CifarReader, RejectsTruncatedFileNamingTheRecord) {
  TempDir dir;
  std::vector<uint8_t> bytes = cifar_bytes(CifarKind::kCifar10, 4, [](size_t) { return 1; });
  bytes.resize(3 * 3073 + 100);
  write_bytes(dir.file("data_batch_3.bin"), bytes);
  EXPECT_EQ(
      error_of([&] { read_cifar_files({dir.file("data_batch_3.bin")}, CifarKind::kCifar10); }),
      "cifar: " + dir.file("data_batch_3.bin") +
          ": truncated at record 3 (9319 bytes; records are 3073)");
}

TEST(CifarReader, HintsAtTheOtherKindWhenTheSizeFitsIt) {
  const std::vector<uint8_t> bytes = cifar_bytes(CifarKind::kCifar100, 2, [](size_t) { return 0; });
  EXPECT_TRUE(contains(
      error_of([&] { parse_cifar_records(bytes.data(), bytes.size(), CifarKind::kCifar10, "f"); }),
      "cifar: f: truncated at record 2 (6148 bytes; records are 3073); the size is a whole "
      "number of 3074-byte CIFAR-100 records"));
}

TEST(CifarReader, RejectsLabelsOutOfRangeNamingTheRecord) {
  std::vector<uint8_t> ten = cifar_bytes(CifarKind::kCifar10, 3, [](size_t) { return 7; });
  ten[2 * 3073] = 10;
  EXPECT_EQ(
      error_of([&] { parse_cifar_records(ten.data(), ten.size(), CifarKind::kCifar10, "t"); }),
      "cifar: t: record 2 has label 10, expected 0..9");

  std::vector<uint8_t> hundred = cifar_bytes(CifarKind::kCifar100, 2, [](size_t) { return 50; });
  hundred[3074 + 1] = 100;
  EXPECT_EQ(error_of([&] {
              parse_cifar_records(hundred.data(), hundred.size(), CifarKind::kCifar100, "h");
            }),
            "cifar: h: record 1 has fine label 100, expected 0..99");
  hundred[3074 + 1] = 5;
  hundred[0] = 20;
  EXPECT_EQ(error_of([&] {
              parse_cifar_records(hundred.data(), hundred.size(), CifarKind::kCifar100, "h");
            }),
            "cifar: h: record 0 has coarse label 20, expected 0..19");
}

TEST(CifarReader, RejectsEmptyAndMissingFiles) {
  TempDir dir;
  write_bytes(dir.file("empty.bin"), {});
  EXPECT_EQ(error_of([&] { read_cifar_files({dir.file("empty.bin")}, CifarKind::kCifar100); }),
            "cifar: " + dir.file("empty.bin") +
                ": empty file, expected CIFAR-100 records of "
                "3074 bytes");
  EXPECT_TRUE(
      contains(error_of([&] { read_cifar_files({dir.file("absent.bin")}, CifarKind::kCifar10); }),
               "cifar: " + dir.file("absent.bin") + ": cannot open: "));
}

TEST(CifarDataset, LoadsCifar10Folder) {
  TempDir dir;
  write_cifar10_folder(dir);
  const DatasetSplits d = load_dataset("cifar10:" + dir.path());
  EXPECT_EQ(d.train.size(), 10);
  EXPECT_EQ(d.test.size(), 3);
  EXPECT_EQ(d.train.sample_shape(), (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(d.train.inputs.scalar_type(), torch::kUInt8);
  EXPECT_EQ(d.train.targets.scalar_type(), torch::kInt64);
  EXPECT_EQ(d.train.num_classes, 10);
  EXPECT_EQ(d.test.num_classes, 10);
  // Batches are concatenated in order 1..5: labels run 0..9.
  EXPECT_TRUE(torch::equal(d.train.targets, torch::arange(10, torch::kInt64)));
  EXPECT_EQ(d.test.targets[2].item<int64_t>(), 7);
  // Train sample 7 is record 1 of data_batch_4.bin; channel 1, row 3, column 4.
  EXPECT_EQ(d.train.inputs[7][1][3][4].item<int64_t>(), pixel(4, 1, 1024 + 3 * 32 + 4));
  EXPECT_EQ(d.train.name, "cifar10/train");
  EXPECT_EQ(d.test.name, "cifar10/test");
  EXPECT_EQ(d.description, "cifar10 (" + dir.path() + "): 10 train, 3 test, 3x32x32, 10 classes");
  const torch::Tensor pixels = d.train.inputs.to(torch::kFloat64) / 255.0;
  EXPECT_NEAR(d.normalize_mean, pixels.mean().item<double>(), 1e-12);
}

TEST(CifarDataset, LoadsCifar100FolderWithFineLabels) {
  TempDir dir;
  write_bytes(dir.file("train.bin"), cifar_bytes(CifarKind::kCifar100, 4, [](size_t i) {
                return static_cast<int>(20 + i * 25);
              }));
  write_bytes(dir.file("test.bin"), cifar_bytes(CifarKind::kCifar100, 2, [](size_t) { return 3; }));
  const DatasetSplits d = load_dataset("cifar100:" + dir.path());
  EXPECT_EQ(d.train.num_classes, 100);
  EXPECT_TRUE(torch::equal(d.train.targets, torch::tensor({20, 45, 70, 95}, torch::kInt64)));
  EXPECT_EQ(d.test.size(), 2);
  EXPECT_EQ(d.description, "cifar100 (" + dir.path() + "): 4 train, 2 test, 3x32x32, 100 classes");
}

TEST(CifarDataset, ListsMissingBatchFilesByName) {
  TempDir dir;
  write_cifar10_folder(dir);
  ASSERT_EQ(std::remove(dir.file("data_batch_2.bin").c_str()), 0);
  ASSERT_EQ(std::remove(dir.file("test_batch.bin").c_str()), 0);
  const std::string spec = "cifar10:" + dir.path();
  EXPECT_EQ(error_of([&] { load_dataset(spec); }),
            "data: " + spec + ": folder " + dir.path() + " lacks data_batch_2.bin, test_batch.bin");
  EXPECT_TRUE(contains(error_of([&] { load_dataset("cifar100:" + dir.path()); }),
                       "lacks train.bin, test.bin"));
}

TEST(CifarDataset, TruncatedBatchErrorNamesFileAndRecord) {
  TempDir dir;
  write_cifar10_folder(dir);
  std::vector<uint8_t> bytes = cifar_bytes(CifarKind::kCifar10, 2, [](size_t) { return 0; });
  bytes.pop_back();
  write_bytes(dir.file("data_batch_3.bin"), bytes);
  EXPECT_EQ(error_of([&] { load_dataset("cifar10:" + dir.path()); }),
            "cifar: " + dir.file("data_batch_3.bin") +
                ": truncated at record 1 (6145 bytes; records are 3073)");
}

TEST(DatasetSpec, SuggestsSpecsForTyposAndBareFolders) {
  EXPECT_EQ(error_of([] { load_dataset("cifr10:/data/cifar"); }),
            "data: unknown dataset format 'cifr10:' in 'cifr10:/data/cifar'; did you mean "
            "'cifar10:'?");
  EXPECT_TRUE(contains(error_of([] { load_dataset("cifar100"); }),
                       "expected one of: fashion-mnist, mnist, idx:DIR, cifar10:DIR, "
                       "cifar100:DIR, npy:DIR, records:DIR"));
  EXPECT_TRUE(
      contains(error_of([] { load_dataset("fashion-minst"); }), "did you mean 'fashion-mnist'?"));
  EXPECT_TRUE(contains(error_of([] { load_dataset("npy:"); }),
                       "data: 'npy:' needs a folder after the colon, e.g. npy:/data/arrays"));
  TempDir dir;
  write_cifar10_folder(dir);
  EXPECT_EQ(error_of([&] { load_dataset(dir.path()); }),
            "data: unknown dataset '" + dir.path() +
                "'; to load a CIFAR-10 folder use cifar10:" + dir.path());
  EXPECT_EQ(dataset_spec_examples(),
            (std::vector<std::string>{"fashion-mnist", "mnist", "idx:DIR", "cifar10:DIR",
                                      "cifar100:DIR", "npy:DIR", "records:DIR", "folder:DIR"}));
}

}  // namespace
}  // namespace saturate
