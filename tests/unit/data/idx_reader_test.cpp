// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/idx_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "saturate/core/error.h"
#include "testing/temp_dir.h"
#include "testing/error_of.h"

namespace saturate {
namespace {

using testing::TempDir;

IdxArray make_uint8(std::vector<int64_t> dims) {
  IdxArray a;
  a.type = IdxType::kUInt8;
  a.dims = std::move(dims);
  a.data.resize(static_cast<size_t>(a.numel()));
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<uint8_t>(i * 7 + 3);
  return a;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// The message of the saturate::Error that `fn` throws; fails the test if it throws nothing.
using testing::contains;
using testing::error_of;

TEST(IdxReader, RoundTripsPlainFile) {
  TempDir dir;
  const IdxArray images = make_uint8({3, 4, 5});
  write_idx(dir.file("images"), images, /*gzip=*/false);
  EXPECT_EQ(read_bytes(dir.file("images")).size(), 4 + 3 * 4 + 60u);

  const IdxArray back = read_idx(dir.file("images"));
  EXPECT_EQ(back.type, IdxType::kUInt8);
  EXPECT_EQ(back.dims, images.dims);
  EXPECT_EQ(back.data, images.data);
  EXPECT_EQ(back.numel(), 60);
}

TEST(IdxReader, RoundTripsGzipFile) {
  TempDir dir;
  const IdxArray labels = make_uint8({1000});
  write_idx(dir.file("labels.gz"), labels, /*gzip=*/true);
  const std::vector<uint8_t> raw = read_bytes(dir.file("labels.gz"));
  ASSERT_GE(raw.size(), 2u);
  EXPECT_EQ(raw[0], 0x1f);  // gzip magic: the file really is compressed
  EXPECT_EQ(raw[1], 0x8b);

  const IdxArray back = read_idx(dir.file("labels.gz"));
  EXPECT_EQ(back.dims, labels.dims);
  EXPECT_EQ(back.data, labels.data);
}

TEST(IdxReader, StoresMultiByteElementsBigEndianAndReadsThemInHostOrder) {
  TempDir dir;
  IdxArray a;
  a.type = IdxType::kInt32;
  a.dims = {2};
  const int32_t values[2] = {0x01020304, -2};
  a.data.resize(sizeof(values));
  std::memcpy(a.data.data(), values, sizeof(values));
  write_idx(dir.file("ints"), a, /*gzip=*/false);

  const std::vector<uint8_t> raw = read_bytes(dir.file("ints"));
  ASSERT_EQ(raw.size(), 4 + 4 + 8u);
  EXPECT_EQ(raw[2], 0x0C);
  EXPECT_EQ((std::vector<uint8_t>(raw.begin() + 8, raw.begin() + 12)),
            (std::vector<uint8_t>{1, 2, 3, 4}));

  const IdxArray back = read_idx(dir.file("ints"));
  int32_t read_values[2];
  ASSERT_EQ(back.data.size(), sizeof(read_values));
  std::memcpy(read_values, back.data.data(), sizeof(read_values));
  EXPECT_EQ(read_values[0], values[0]);
  EXPECT_EQ(read_values[1], values[1]);
}

TEST(IdxReader, RejectsMissingFile) {
  TempDir dir;
  const std::string path = dir.file("absent-idx1-ubyte");
  EXPECT_TRUE(contains(error_of([&] { read_idx(path); }), path + ": cannot open: "));
}

TEST(IdxReader, RejectsTruncatedData) {
  TempDir dir;
  write_idx(dir.file("images"), make_uint8({2, 3, 3}), /*gzip=*/false);
  std::vector<uint8_t> bytes = read_bytes(dir.file("images"));
  bytes.resize(bytes.size() - 5);
  write_bytes(dir.file("images"), bytes);
  EXPECT_TRUE(contains(
      error_of([&] { read_idx(dir.file("images")); }),
      dir.file("images") + ": truncated: expected 18 bytes of data after the header, found 13"));
}

TEST(IdxReader, RejectsTruncatedHeader) {
  const std::vector<uint8_t> bytes = {0, 0, 0x08, 3, 0, 0, 0, 2, 0, 0};
  EXPECT_TRUE(contains(error_of([&] { parse_idx(bytes.data(), bytes.size(), "f"); }),
                       "f: truncated IDX header: 3 dimensions need 16 header bytes, found 10"));
  EXPECT_TRUE(contains(error_of([&] { parse_idx(bytes.data(), 2, "f"); }),
                       "f: too short for an IDX header (2 bytes"));
}

TEST(IdxReader, RejectsWrongMagic) {
  const std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0, 0, 0, 1, 0};
  EXPECT_TRUE(contains(error_of([&] { parse_idx(png.data(), png.size(), "x.png"); }),
                       "x.png: not an IDX file: magic bytes are 89 50 4e 47"));
  const std::vector<uint8_t> bad_type = {0, 0, 0x0A, 1, 0, 0, 0, 1, 0};
  EXPECT_TRUE(contains(error_of([&] { parse_idx(bad_type.data(), bad_type.size(), "f"); }),
                       "f: not an IDX file: magic bytes are 00 00 0a 01"));
}

TEST(IdxReader, RejectsZeroOrMoreThanFourDimensions) {
  const std::vector<uint8_t> none = {0, 0, 0x08, 0};
  EXPECT_TRUE(contains(error_of([&] { parse_idx(none.data(), none.size(), "f"); }),
                       "f: IDX header says 0 dimensions, expected 1 to 4"));
  std::vector<uint8_t> five = {0, 0, 0x08, 5};
  for (int i = 0; i < 5; ++i) five.insert(five.end(), {0, 0, 0, 1});
  five.push_back(42);
  EXPECT_TRUE(contains(error_of([&] { parse_idx(five.data(), five.size(), "f"); }),
                       "f: IDX header says 5 dimensions, expected 1 to 4"));
}

TEST(IdxReader, RejectsZeroDimension) {
  const std::vector<uint8_t> bytes = {0, 0, 0x08, 2, 0, 0, 0, 3, 0, 0, 0, 0};
  EXPECT_TRUE(contains(error_of([&] { parse_idx(bytes.data(), bytes.size(), "f"); }),
                       "f: dimension 1 is 0 (dims 3 x 0)"));
}

TEST(IdxReader, RejectsLyingHeaderWithoutAllocating) {
  // Four dims of 2^32 - 1 overflow 64 bits; one such dim claims 4 GiB of a 9-byte file.
  std::vector<uint8_t> huge = {0, 0, 0x0E, 4};
  for (int i = 0; i < 4; ++i) huge.insert(huge.end(), {0xFF, 0xFF, 0xFF, 0xFF});
  EXPECT_TRUE(contains(error_of([&] { parse_idx(huge.data(), huge.size(), "f"); }),
                       "describe more than 2^63 bytes"));
  const std::vector<uint8_t> big = {0, 0, 0x08, 1, 0xFF, 0xFF, 0xFF, 0xFF, 7};
  EXPECT_TRUE(contains(error_of([&] { parse_idx(big.data(), big.size(), "f"); }),
                       "expected 4294967295 bytes of data after the header, found 1"));
}

TEST(IdxReader, RejectsTrailingBytes) {
  TempDir dir;
  write_idx(dir.file("labels"), make_uint8({4}), /*gzip=*/false);
  std::vector<uint8_t> bytes = read_bytes(dir.file("labels"));
  bytes.insert(bytes.end(), {'j', 'u', 'n', 'k'});
  write_bytes(dir.file("labels"), bytes);
  EXPECT_TRUE(
      contains(error_of([&] { read_idx(dir.file("labels")); }),
               dir.file("labels") +
                   ": 4 trailing bytes: expected 4 bytes of data after the header, found 8"));
}

TEST(IdxReader, RejectsCorruptGzipWithZlibMessage) {
  TempDir dir;
  write_idx(dir.file("images.gz"), make_uint8({64, 8, 8}), /*gzip=*/true);
  std::vector<uint8_t> bytes = read_bytes(dir.file("images.gz"));
  ASSERT_GT(bytes.size(), 40u);
  // Damage the deflate stream between the 10-byte gzip header and the 8-byte trailer.
  for (size_t i = 12; i < bytes.size() - 10; i += 3) bytes[i] ^= 0x5A;
  write_bytes(dir.file("images.gz"), bytes);
  const std::string message = error_of([&] { read_idx(dir.file("images.gz")); });
  EXPECT_TRUE(contains(message, dir.file("images.gz") + ": corrupt gzip data: "));
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(IdxReader, RejectsTruncatedGzip) {
  TempDir dir;
  write_idx(dir.file("images.gz"), make_uint8({64, 8, 8}), /*gzip=*/true);
  std::vector<uint8_t> bytes = read_bytes(dir.file("images.gz"));
  bytes.resize(bytes.size() / 2);
  write_bytes(dir.file("images.gz"), bytes);
  EXPECT_TRUE(contains(error_of([&] { read_idx(dir.file("images.gz")); }),
                       dir.file("images.gz") + ": gzip data is truncated or corrupt: "));
}

TEST(IdxReader, WriteRejectsDataThatDoesNotMatchDims) {
  TempDir dir;
  IdxArray a = make_uint8({2, 2});
  a.data.pop_back();
  EXPECT_TRUE(contains(error_of([&] { write_idx(dir.file("x"), a, /*gzip=*/false); }),
                       "dims 2 x 2 need 4 bytes of data, have 3"));
  a.dims = {};
  EXPECT_TRUE(contains(error_of([&] { write_idx(dir.file("x"), a, /*gzip=*/false); }),
                       "cannot write IDX with 0 dimensions"));
}

// A small in-process fuzz pass: mutated valid files and random bytes either parse into a
// consistent array or raise saturate::Error; nothing else may escape.
TEST(IdxReader, ParseSurvivesMutatedAndRandomInput) {
  std::mt19937_64 rng(1234);
  const std::vector<uint8_t> valid = {0, 0, 0x0B, 2, 0, 0, 0, 2, 0, 0,  0,  3,
                                      1, 2, 3,    4, 5, 6, 7, 8, 9, 10, 11, 12};
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::vector<uint8_t> bytes = valid;
    if (iteration % 3 == 0) {
      bytes.resize(rng() % 40);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      if (bytes.size() >= 3 && rng() % 2) bytes[0] = bytes[1] = 0;
    } else {
      for (int m = 0; m < 1 + static_cast<int>(rng() % 3); ++m) {
        bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
      }
      bytes.resize(rng() % (bytes.size() + 8));
    }
    try {
      const IdxArray a = parse_idx(bytes.data(), bytes.size(), "fuzz");
      ASSERT_EQ(a.data.size(), static_cast<size_t>(a.numel()) * idx_element_size(a.type));
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace saturate
