// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/data/dataset.h"
#include "saturate/data/npy_reader.h"
#include "testing/error_of.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// A .npy image written by hand, independently of write_npy: `dict` padded with spaces and a
// newline to a 64-byte boundary, as numpy does, then `data` verbatim.
std::vector<uint8_t> npy_bytes(int major, const std::string& dict,
                               const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const size_t length_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  while ((out.size() + length_bytes + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  for (size_t i = 0; i < length_bytes; ++i)
    out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

NpyArray parse(const std::vector<uint8_t>& bytes) {
  return parse_npy(bytes.data(), bytes.size(), "a.npy");
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  return error_of([&] { parse(bytes); });
}

NpyArray uint8_array(std::vector<int64_t> shape) {
  NpyArray a;
  a.type = NpyType::kUInt8;
  a.shape = std::move(shape);
  a.data.resize(static_cast<size_t>(a.numel()));
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<uint8_t>(i * 5 + 1);
  return a;
}

NpyArray int64_array(const std::vector<int64_t>& values) {
  NpyArray a;
  a.type = NpyType::kInt64;
  a.shape = {static_cast<int64_t>(values.size())};
  a.data.resize(values.size() * 8);
  std::memcpy(a.data.data(), values.data(), a.data.size());
  return a;
}

TEST(NpyReader, RoundTripsUint8ImagesAsVersion1) {
  TempDir dir;
  const NpyArray images = uint8_array({3, 4, 5});
  write_npy(dir.file("x.npy"), images);
  const std::vector<uint8_t> raw = read_bytes(dir.file("x.npy"));
  ASSERT_EQ(raw.size(), 128 + 60u);  // header padded to a multiple of 64, as numpy pads it
  EXPECT_EQ(std::string(raw.begin() + 1, raw.begin() + 6), "NUMPY");
  EXPECT_EQ(raw[6], 1);
  EXPECT_EQ(raw[8] | (raw[9] << 8), 128 - 10);  // 2-byte little-endian header length
  EXPECT_EQ(raw[127], '\n');
  EXPECT_TRUE(contains(std::string(raw.begin() + 10, raw.begin() + 128),
                       "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 4, 5), }"));

  const NpyArray back = read_npy(dir.file("x.npy"));
  EXPECT_EQ(back.type, NpyType::kUInt8);
  EXPECT_EQ(back.shape, images.shape);
  EXPECT_EQ(back.data, images.data);
}

TEST(NpyReader, RoundTripsInt64LabelsAsVersion2) {
  TempDir dir;
  write_npy(dir.file("y.npy"), int64_array({3, 0, 9, 1}), /*major_version=*/2);
  const std::vector<uint8_t> raw = read_bytes(dir.file("y.npy"));
  ASSERT_EQ(raw.size(), 128 + 32u);
  EXPECT_EQ(raw[6], 2);
  EXPECT_EQ(raw[8] | (raw[9] << 8) | (raw[10] << 16) | (raw[11] << 24), 128 - 12);  // 4 bytes
  EXPECT_TRUE(contains(std::string(raw.begin() + 12, raw.begin() + 128), "'shape': (4,)"));
  const NpyArray back = read_npy(dir.file("y.npy"));
  EXPECT_EQ(back.type, NpyType::kInt64);
  EXPECT_EQ(npy_labels(back, "y.npy"), (std::vector<int64_t>{3, 0, 9, 1}));
}

TEST(NpyReader, ParsesHeadersAsOtherWritersSpellThem) {
  // Keys in another order, double quotes, Python 2 long literals, no trailing comma.
  const NpyArray a =
      parse(npy_bytes(1, "{\"shape\": (2L, 3L), 'fortran_order': False, 'descr': '<u2'}",
                      {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 0, 1}));
  EXPECT_EQ(a.type, NpyType::kUInt16);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(npy_labels(NpyArray{a.type, {6}, a.data}, "a.npy"),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 256}));
  // Version 3.0 (UTF-8 header) and fortran_order True on a 1-dimensional array, where the two
  // orders coincide.
  const NpyArray b =
      parse(npy_bytes(3, "{'descr': '|i1', 'fortran_order': True, 'shape': (3,), }", {0xFF, 1, 2}));
  EXPECT_EQ(b.type, NpyType::kInt8);
  EXPECT_EQ(b.data, (std::vector<uint8_t>{0xFF, 1, 2}));
  // A 0-dimensional array holds one element.
  const NpyArray c =
      parse(npy_bytes(1, "{'descr': '<i4', 'fortran_order': False, 'shape': ()}", {7, 0, 0, 0}));
  EXPECT_TRUE(c.shape.empty());
  EXPECT_EQ(c.numel(), 1);
}

TEST(NpyReader, ConvertsBigEndianElementsToHostOrder) {
  const NpyArray a = parse(npy_bytes(1, "{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }",
                                     {0, 0, 1, 2, 0, 0, 0, 7}));
  EXPECT_EQ(npy_labels(a, "a.npy"), (std::vector<int64_t>{258, 7}));
}

TEST(NpyReader, RejectsBadMagicAndVersion) {
  const std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(parse_error(png),
            "npy: a.npy: not a .npy file: it does not start with \\x93NUMPY and a version");
  std::vector<uint8_t> v4 =
      npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': ()}", {1});
  v4[6] = 4;
  EXPECT_EQ(parse_error(v4),
            "npy: a.npy: unsupported .npy format version 4.0, expected 1.0, "
            "2.0 or 3.0");
}

TEST(NpyReader, NamesUnsupportedDtypesAndOrders) {
  EXPECT_TRUE(
      contains(parse_error(npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
                                     {0, 0, 0, 0})),
               "npy: a.npy: unsupported dtype '<f4'; saturate reads integer arrays"));
  EXPECT_TRUE(contains(
      parse_error(npy_bytes(1, "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (1,), }",
                            {0, 0, 0, 0})),
      "npy: a.npy: malformed header: structured dtypes (a list as 'descr') are not supported"));
  EXPECT_TRUE(contains(
      parse_error(npy_bytes(1, "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3), }",
                            std::vector<uint8_t>(6))),
      "npy: a.npy: fortran_order is True (column-major data), which is not supported"));
}

TEST(NpyReader, RejectsTruncatedDataNamingTheIncompleteSample) {
  TempDir dir;
  write_npy(dir.file("x.npy"), uint8_array({4, 2, 3}));
  std::vector<uint8_t> bytes = read_bytes(dir.file("x.npy"));
  bytes.resize(bytes.size() - 4);
  write_bytes(dir.file("x.npy"), bytes);
  EXPECT_EQ(error_of([&] { read_npy(dir.file("x.npy")); }),
            "npy: " + dir.file("x.npy") +
                ": truncated: shape (4, 2, 3) of uint8 needs 24 bytes of data, found 20; sample 3 "
                "is incomplete");
}

TEST(NpyReader, RejectsTrailingBytes) {
  std::vector<uint8_t> bytes =
      npy_bytes(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
                {1, 0, 0, 0, 0, 0, 0, 0, 9, 9});
  EXPECT_EQ(parse_error(bytes),
            "npy: a.npy: 2 trailing bytes: shape (1,) of int64 needs 8 bytes "
            "of data, found 10");
}

TEST(NpyReader, RejectsTruncatedAndMalformedHeaders) {
  std::vector<uint8_t> bytes =
      npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", {1, 2});
  EXPECT_EQ(parse_error(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 40)),
            "npy: a.npy: truncated header: it claims 118 bytes, the file has 30 after the 10-byte "
            "prefix");
  EXPECT_TRUE(
      contains(parse_error(npy_bytes(1, "{'descr': '|u1', 'shape': (2,), }", {1, 2})),
               "npy: a.npy: malformed header: the dict needs the keys 'descr', 'fortran_order' and "
               "'shape'"));
  EXPECT_TRUE(contains(
      parse_error(npy_bytes(1, "{'descr': '|u1, 'fortran_order': False, 'shape': (2,)}", {1, 2})),
      "npy: a.npy: malformed header: expected '}'"));
  EXPECT_TRUE(contains(
      parse_error(npy_bytes(1, "{'descr': '|u1', 'descr': '|u1', 'fortran_order': False}", {})),
      "malformed header: duplicate key 'descr'"));
  EXPECT_TRUE(contains(
      parse_error(npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (-2,)}", {})),
      "malformed header: expected a non-negative integer in 'shape'"));
  // A lying shape is refused before anything is allocated.
  EXPECT_TRUE(
      contains(parse_error(npy_bytes(1,
                                     "{'descr': '<i8', 'fortran_order': False, 'shape': "
                                     "(4294967296, 4294967296), }",
                                     {})),
               "npy: a.npy: shape (4294967296, 4294967296) describes more than 2^63 bytes"));
}

TEST(NpyReader, ImageShapeAcceptsNhwAndNchwButNotChannelsLast) {
  EXPECT_EQ(npy_image_shape(uint8_array({5, 28, 28}), "x"), (std::array<int64_t, 4>{5, 1, 28, 28}));
  EXPECT_EQ(npy_image_shape(uint8_array({2, 3, 8, 6}), "x"), (std::array<int64_t, 4>{2, 3, 8, 6}));
  EXPECT_EQ(error_of([] {
              npy_image_shape(uint8_array({2, 8, 6, 3}), "x.npy");
            }),
            "npy: x.npy: shape (2, 8, 6, 3) looks like [N, H, W, C] (channels last), which is not "
            "supported; save np.ascontiguousarray(x.transpose(0, 3, 1, 2)) to get [N, C, H, W]");
  EXPECT_TRUE(contains(error_of([] {
                         npy_image_shape(uint8_array({6, 4}), "x.npy");
                       }),
                       "npy: x.npy: images must be shaped [N, H, W] or [N, C, H, W], found shape "
                       "(6, 4)"));
  EXPECT_TRUE(contains(error_of([] {
                         npy_image_shape(int64_array({1, 2, 3}), "x.npy");
                       }),
                       "npy: x.npy: images must be uint8 ('|u1'), found int64"));
}

TEST(NpyReader, LabelsMustBeOneDimensionalAndNonNegative) {
  EXPECT_EQ(error_of([] {
              npy_labels(uint8_array({4, 1}), "y.npy");
            }),
            "npy: y.npy: labels must be shaped [N], found (4, 1); flatten with y.reshape(-1)");
  EXPECT_EQ(error_of([] {
              npy_labels(int64_array({0, 4, -1}), "y.npy");
            }),
            "npy: y.npy: label of sample 2 is -1, expected a class index >= 0");
  NpyArray huge = int64_array({-5});
  huge.type = NpyType::kUInt64;
  EXPECT_EQ(error_of([&] { npy_labels(huge, "y.npy"); }),
            "npy: y.npy: label of sample 0 is above 2^63 - 1");
}

// A folder for "npy:DIR": 5 train and 3 test images of `shape` (without N), 4 classes.
void write_npy_folder(const TempDir& dir, const std::vector<int64_t>& shape) {
  std::vector<int64_t> train_shape = {5}, test_shape = {3};
  train_shape.insert(train_shape.end(), shape.begin(), shape.end());
  test_shape.insert(test_shape.end(), shape.begin(), shape.end());
  write_npy(dir.file("train_x.npy"), uint8_array(train_shape));
  write_npy(dir.file("train_y.npy"), int64_array({0, 1, 2, 3, 0}));
  write_npy(dir.file("test_x.npy"), uint8_array(test_shape), /*major_version=*/2);
  NpyArray test_labels;  // a narrower label type than the training split's
  test_labels.type = NpyType::kUInt8;
  test_labels.shape = {3};
  test_labels.data = {2, 1, 0};
  write_npy(dir.file("test_y.npy"), test_labels);
}

TEST(NpyDataset, LoadsNpyFolder) {
  TempDir dir;
  write_npy_folder(dir, {4, 6});
  const DatasetSplits d = load_dataset("npy:" + dir.path());
  EXPECT_EQ(d.train.size(), 5);
  EXPECT_EQ(d.test.size(), 3);
  EXPECT_EQ(d.train.sample_shape(), (std::vector<int64_t>{1, 4, 6}));
  EXPECT_EQ(d.train.num_classes, 4);
  EXPECT_TRUE(torch::equal(d.test.targets, torch::tensor({2, 1, 0}, torch::kInt64)));
  EXPECT_EQ(d.train.inputs[2][0][1][3].item<int64_t>(), static_cast<uint8_t>((2 * 24 + 9) * 5 + 1));
  const std::string label = dir.path().substr(dir.path().rfind('/') + 1);
  EXPECT_EQ(d.train.name, label + "/train");
  EXPECT_EQ(d.description, label + " (" + dir.path() + "): 5 train, 3 test, 1x4x6, 4 classes");
}

TEST(NpyDataset, LoadsChannelMajorImages) {
  TempDir dir;
  write_npy_folder(dir, {3, 2, 2});
  const DatasetSplits d = load_dataset("npy:" + dir.path());
  EXPECT_EQ(d.test.sample_shape(), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(d.test.inputs[1][2][1][0].item<int64_t>(), static_cast<uint8_t>((12 + 10) * 5 + 1));
}

TEST(NpyDataset, RejectsImageLabelCountMismatchNamingBothFiles) {
  TempDir dir;
  write_npy_folder(dir, {4, 6});
  write_npy(dir.file("train_y.npy"), int64_array({0, 1, 2, 3}));
  EXPECT_EQ(error_of([&] { load_dataset("npy:" + dir.path()); }),
            "data: image and label counts differ: " + dir.file("train_x.npy") + " has 5 images, " +
                dir.file("train_y.npy") + " has 4 labels");
}

TEST(NpyDataset, ReaderErrorsNameTheFile) {
  TempDir dir;
  write_npy_folder(dir, {4, 6});
  std::vector<uint8_t> bytes = read_bytes(dir.file("test_x.npy"));
  bytes.resize(bytes.size() - 30);
  write_bytes(dir.file("test_x.npy"), bytes);
  EXPECT_EQ(error_of([&] { load_dataset("npy:" + dir.path()); }),
            "npy: " + dir.file("test_x.npy") +
                ": truncated: shape (3, 4, 6) of uint8 needs 72 bytes of data, found 42; sample 1 "
                "is incomplete");
}

TEST(NpyDataset, RejectsDifferentTrainAndTestShapesAndMissingFiles) {
  TempDir dir;
  write_npy_folder(dir, {4, 6});
  write_npy(dir.file("test_x.npy"), uint8_array({3, 6, 4}));
  EXPECT_EQ(error_of([&] { load_dataset("npy:" + dir.path()); }),
            "data: sample shapes differ: " + dir.file("train_x.npy") + " has 1x4x6 images, " +
                dir.file("test_x.npy") + " has 1x6x4");
  ASSERT_EQ(std::remove(dir.file("train_y.npy").c_str()), 0);
  EXPECT_TRUE(contains(error_of([&] { load_dataset("npy:" + dir.path()); }),
                       "folder " + dir.path() + " lacks train_y.npy"));
}

}  // namespace
}  // namespace saturate
