// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/record_file.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/data/dataset.h"
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

uint64_t get_le(const std::vector<uint8_t>& bytes, size_t offset, int num_bytes) {
  uint64_t v = 0;
  for (int i = num_bytes - 1; i >= 0; --i) v = (v << 8) | bytes.at(offset + i);
  return v;
}

void put_le(std::vector<uint8_t>& bytes, size_t offset, uint64_t v, int num_bytes) {
  for (int i = 0; i < num_bytes; ++i) bytes.at(offset + i) = static_cast<uint8_t>(v >> (8 * i));
}

// Deterministic samples: pixel j of sample i is (i * 13 + j * 7) mod 256, the label
// (i * 3) mod classes. read() throws at `fail_at` to test interrupted writes.
class PatternSource : public SampleSource {
 public:
  PatternSource(int64_t count, std::vector<int64_t> shape, int64_t classes, int64_t fail_at = -1)
      : count_(count), shape_(std::move(shape)), classes_(classes), fail_at_(fail_at) {}
  int64_t size() const override { return count_; }
  std::vector<int64_t> sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return classes_; }
  int64_t read(int64_t index, uint8_t* pixels) const override {
    SATURATE_CHECK(index != fail_at_, "pattern: cannot decode sample ", index);
    for (int64_t j = 0; j < bytes(); ++j) pixels[j] = expected_pixel(index, j);
    return label_override_ >= 0 ? label_override_ : index * 3 % classes_;
  }
  std::string describe() const override { return "pattern"; }

  int64_t bytes() const { return shape_[0] * shape_[1] * shape_[2]; }
  static uint8_t expected_pixel(int64_t i, int64_t j) {
    return static_cast<uint8_t>(i * 13 + j * 7);
  }
  void set_label_override(int64_t label) { label_override_ = label; }

 private:
  int64_t count_;
  std::vector<int64_t> shape_;
  int64_t classes_;
  int64_t fail_at_;
  int64_t label_override_ = -1;
};

// True when `source` returns exactly PatternSource's sample `i`.
::testing::AssertionResult has_pattern_sample(const SampleSource& source, int64_t i,
                                              int64_t classes) {
  const std::vector<int64_t> shape = source.sample_shape();
  const int64_t bytes = shape[0] * shape[1] * shape[2];
  std::vector<uint8_t> pixels(static_cast<size_t>(bytes));
  const int64_t label = source.read(i, pixels.data());
  if (label != i * 3 % classes) {
    return ::testing::AssertionFailure() << "sample " << i << " has label " << label;
  }
  for (int64_t j = 0; j < bytes; ++j) {
    if (pixels[j] != PatternSource::expected_pixel(i, j)) {
      return ::testing::AssertionFailure() << "sample " << i << " differs at byte " << j;
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<std::string> folder_entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  while (const dirent* e = d ? ::readdir(d) : nullptr) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
  }
  if (d) ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

RecordFileOptions small_pages() {
  RecordFileOptions options;
  options.page_bytes = 4096;
  return options;
}

std::string view_error(const std::vector<uint8_t>& bytes) {
  return error_of([&] { RecordFileView(bytes.data(), bytes.size(), "r.rec"); });
}

TEST(RecordFile, RoundTripsEverySample) {
  TempDir dir;
  const PatternSource source(100, {1, 28, 28}, 10);
  write_record_file(dir.file("train.rec"), source);
  const RecordFileSource records(dir.file("train.rec"));
  EXPECT_EQ(records.size(), 100);
  EXPECT_EQ(records.sample_shape(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(records.num_classes(), 10);
  EXPECT_EQ(records.sample_bytes(), 784);
  EXPECT_EQ(records.describe(), dir.file("train.rec") + " (100 samples, memory-mapped)");
  for (int64_t i = 0; i < records.size(); ++i) ASSERT_TRUE(has_pattern_sample(records, i, 10));
  EXPECT_EQ(records.view().label(7), 21 % 10);
}

TEST(RecordFile, LaysOutTheFileAsDocumented) {
  TempDir dir;
  // 3x10x10 samples: 8 + 300 bytes, slots of 312, 13 to a 4096-byte page; 30 samples, 3 pages.
  const RecordFileHeader h =
      write_record_file(dir.file("r.rec"), PatternSource(30, {3, 10, 10}, 7), small_pages());
  EXPECT_EQ(h.slot_bytes(), 312);
  EXPECT_EQ(h.samples_per_page(), 13);
  EXPECT_EQ(h.index_offset, 4096 * 4);

  const std::vector<uint8_t> raw = read_bytes(dir.file("r.rec"));
  ASSERT_EQ(raw.size(), 4096u * 4 + 8 * 30);
  EXPECT_EQ(std::string(raw.begin(), raw.begin() + 8), "SATREC01");
  EXPECT_EQ(get_le(raw, 8, 4), 1u);      // version
  EXPECT_EQ(get_le(raw, 12, 4), 4096u);  // page_bytes
  EXPECT_EQ(get_le(raw, 16, 8), 30u);    // sample_count
  EXPECT_EQ(get_le(raw, 24, 4), 3u);     // C
  EXPECT_EQ(get_le(raw, 28, 4), 10u);    // H
  EXPECT_EQ(get_le(raw, 32, 4), 10u);    // W
  EXPECT_EQ(get_le(raw, 36, 4), 7u);     // num_classes
  EXPECT_EQ(get_le(raw, 40, 8), 4096u * 4);
  // Sample 14 is slot 1 of page 2: label, then pixels; the index repeats the label.
  const size_t slot = 4096 * 2 + 312;
  EXPECT_EQ(get_le(raw, slot, 8), 14u * 3 % 7);
  EXPECT_EQ(raw[slot + 8 + 5], PatternSource::expected_pixel(14, 5));
  EXPECT_EQ(get_le(raw, 4096 * 4 + 8 * 14, 8), 14u * 3 % 7);
  EXPECT_EQ(h.slot_offset(14), static_cast<int64_t>(slot));
}

TEST(RecordFile, ReadsSamplesInAnyOrder) {
  TempDir dir;
  write_record_file(dir.file("r.rec"), PatternSource(50, {3, 10, 10}, 7), small_pages());
  const RecordFileSource records(dir.file("r.rec"));
  std::vector<int64_t> order(50);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  for (int64_t i : order) ASSERT_TRUE(has_pattern_sample(records, i, 7));
}

TEST(RecordFile, ReadsConcurrentlyFromManyThreads) {
  TempDir dir;
  write_record_file(dir.file("r.rec"), PatternSource(400, {1, 12, 12}, 5), small_pages());
  const RecordFileSource records(dir.file("r.rec"));
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t i = t; i < records.size(); i += 3) {
        if (!has_pattern_sample(records, i, 5)) ++failures[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures, (std::vector<int>{0, 0, 0, 0}));
}

TEST(RecordFile, GrowsThePageToHoldOneLargeSample) {
  TempDir dir;
  // 8 + 6400 bytes do not fit a 4096-byte page: pages grow to 8192, one sample each.
  const RecordFileHeader h =
      write_record_file(dir.file("r.rec"), PatternSource(3, {1, 80, 80}, 2), small_pages());
  EXPECT_EQ(h.page_bytes, 8192);
  EXPECT_EQ(h.samples_per_page(), 1);
  const RecordFileSource records(dir.file("r.rec"));
  for (int64_t i = 0; i < 3; ++i) EXPECT_TRUE(has_pattern_sample(records, i, 2));
}

TEST(RecordFile, RejectsATruncatedFileNamingTheFirstIncompleteSample) {
  TempDir dir;
  write_record_file(dir.file("r.rec"), PatternSource(30, {3, 10, 10}, 7), small_pages());
  std::vector<uint8_t> bytes = read_bytes(dir.file("r.rec"));
  // Page 2 holds samples 13..25; cut inside sample 16 (slot 3 of that page).
  bytes.resize(4096 * 2 + 312 * 3 + 100);
  write_bytes(dir.file("r.rec"), bytes);
  EXPECT_EQ(error_of([&] { RecordFileSource source(dir.file("r.rec")); }),
            "records: " + dir.file("r.rec") +
                ": truncated at sample 16 of 30 (9228 bytes, the "
                "header describes 16624)");
  // Every sample whole, but the label index cut short.
  write_record_file(dir.file("r.rec"), PatternSource(30, {3, 10, 10}, 7), small_pages());
  bytes = read_bytes(dir.file("r.rec"));
  bytes.resize(bytes.size() - 1);
  EXPECT_EQ(view_error(bytes),
            "records: r.rec: truncated in the label index (16623 bytes, the header describes "
            "16624)");
  // Every sample whole, cut in the padding after the last one (sample 29 ends at 13532).
  bytes.resize(14000);
  EXPECT_EQ(view_error(bytes),
            "records: r.rec: truncated before the label index (14000 bytes, the header describes "
            "16624)");
  bytes.resize(10);
  EXPECT_EQ(view_error(bytes),
            "records: r.rec: too short for a record file header (10 bytes, "
            "need 64)");
}

TEST(RecordFile, ValidatesEveryHeaderField) {
  TempDir dir;
  write_record_file(dir.file("r.rec"), PatternSource(30, {3, 10, 10}, 7), small_pages());
  const std::vector<uint8_t> good = read_bytes(dir.file("r.rec"));
  const auto with = [&](size_t offset, uint64_t value, int num_bytes) {
    std::vector<uint8_t> bytes = good;
    put_le(bytes, offset, value, num_bytes);
    return view_error(bytes);
  };
  std::vector<uint8_t> bad_magic = good;
  bad_magic[3] = 'X';
  EXPECT_EQ(view_error(bad_magic),
            "records: r.rec: not a saturate record file: magic is 'SATXEC01', expected 'SATREC01'");
  EXPECT_EQ(with(8, 2, 4), "records: r.rec: unsupported version 2, expected 1");
  EXPECT_EQ(with(12, 4000, 4), "records: r.rec: page size 4000 is not a positive multiple of 4096");
  EXPECT_EQ(with(12, 0, 4), "records: r.rec: page size 0 is not a positive multiple of 4096");
  EXPECT_EQ(with(28, 0, 4), "records: r.rec: sample shape 3x0x10 has a zero dimension");
  EXPECT_EQ(with(32, 0xFFFFFFFF, 4),
            "records: r.rec: a 3x10x4294967295 sample does not fit in a page of 4096 bytes");
  EXPECT_EQ(with(36, 0, 4), "records: r.rec: num_classes is 0, expected >= 1");
  EXPECT_EQ(with(16, 40, 8),
            "records: r.rec: index offset 16384 does not match the layout of 40 "
            "samples in 4096-byte pages (expected 20480)");
  EXPECT_TRUE(contains(with(16, uint64_t{1} << 62, 8),
                       "sample count 4611686018427387904 is "
                       "implausibly large"));
  EXPECT_EQ(with(40, 4096 * 3, 8),
            "records: r.rec: index offset 12288 does not match the layout "
            "of 30 samples in 4096-byte pages (expected 16384)");
  EXPECT_EQ(with(50, 1, 1), "records: r.rec: reserved header byte 50 is 1, expected 0");
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_EQ(view_error(longer),
            "records: r.rec: 1 trailing bytes after the label index (the "
            "header describes 16624 bytes)");
}

TEST(RecordFile, RejectsLabelsOutsideTheClasses) {
  TempDir dir;
  write_record_file(dir.file("r.rec"), PatternSource(30, {3, 10, 10}, 7), small_pages());
  std::vector<uint8_t> bytes = read_bytes(dir.file("r.rec"));
  std::vector<uint8_t> bad_index = bytes;
  put_le(bad_index, 4096 * 4 + 8 * 12, 7, 8);
  EXPECT_EQ(view_error(bad_index),
            "records: r.rec: label index says sample 12 has label 7, expected 0..6");
  // A slot damaged after the index was checked: read() names the sample.
  put_le(bytes, 4096 + 312 * 2, static_cast<uint64_t>(-1), 8);
  const RecordFileView view(bytes.data(), bytes.size(), "r.rec");
  std::vector<uint8_t> pixels(300);
  EXPECT_EQ(view.read(1, pixels.data()), 3);
  EXPECT_EQ(error_of([&] { view.read(2, pixels.data()); }),
            "records: r.rec: sample 2 has label -1, expected 0..6");
}

TEST(RecordFile, WriteIsAtomicAndCleansUpWhenTheSourceFails) {
  TempDir dir;
  write_record_file(dir.file("r.rec"), PatternSource(5, {1, 4, 4}, 2));
  const std::vector<uint8_t> before = read_bytes(dir.file("r.rec"));
  EXPECT_EQ(error_of([&] {
              write_record_file(dir.file("r.rec"), PatternSource(40, {1, 4, 4}, 2, /*fail_at=*/33));
            }),
            "pattern: cannot decode sample 33");
  EXPECT_EQ(read_bytes(dir.file("r.rec")), before);  // the old file, untouched
  EXPECT_EQ(folder_entries(dir.path()), (std::vector<std::string>{"r.rec"}));  // no temp file

  PatternSource bad_label(5, {1, 4, 4}, 2);
  bad_label.set_label_override(2);
  EXPECT_EQ(error_of([&] { write_record_file(dir.file("r.rec"), bad_label); }),
            "records: " + dir.file("r.rec") + ": sample 0 of pattern has label 2, expected 0..1");
  EXPECT_EQ(folder_entries(dir.path()), (std::vector<std::string>{"r.rec"}));
}

TEST(RecordFile, WriteRejectsBadShapesAndOptions) {
  TempDir dir;
  EXPECT_TRUE(contains(error_of([&] {
                         write_record_file(dir.file("r.rec"), PatternSource(1, {4, 4}, 2));
                       }),
                       "has a sample shape that is not {C, H, W}"));
  RecordFileOptions options;
  options.page_bytes = 1000;
  EXPECT_TRUE(
      contains(error_of([&] {
                 write_record_file(dir.file("r.rec"), PatternSource(1, {1, 4, 4}, 2), options);
               }),
               "page size 1000 is not a positive multiple of 4096"));
  EXPECT_TRUE(
      contains(error_of([&] {
                 write_record_file(dir.file("nowhere/r.rec"), PatternSource(1, {1, 4, 4}, 2));
               }),
               "records: " + dir.file("nowhere/r.rec") + ": cannot create "));
}

TEST(RecordFile, EmptySplitIsAValidFile) {
  TempDir dir;
  const RecordFileHeader h = write_record_file(dir.file("r.rec"), PatternSource(0, {1, 2, 2}, 2));
  EXPECT_EQ(h.index_offset, kDefaultRecordPageBytes);
  const RecordFileSource records(dir.file("r.rec"));
  EXPECT_EQ(records.size(), 0);
}

TEST(RecordDataset, LoadsRecordsFolder) {
  TempDir dir;
  write_record_file(dir.file("train.rec"), PatternSource(20, {2, 3, 4}, 6), small_pages());
  write_record_file(dir.file("test.rec"), PatternSource(7, {2, 3, 4}, 6));
  const DatasetSplits d = load_dataset("records:" + dir.path());
  EXPECT_EQ(d.train.size(), 20);
  EXPECT_EQ(d.test.size(), 7);
  EXPECT_EQ(d.train.sample_shape(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(d.train.num_classes, 6);
  EXPECT_EQ(d.train.targets[5].item<int64_t>(), 15 % 6);
  EXPECT_EQ(d.test.inputs[6][1][2][3].item<int64_t>(), PatternSource::expected_pixel(6, 23));
  const std::string label = dir.path().substr(dir.path().rfind('/') + 1);
  EXPECT_EQ(d.description, label + " (" + dir.path() + "): 20 train, 7 test, 2x3x4, 6 classes");
}

TEST(RecordDataset, RejectsMismatchedSplitsAndNamesMissingFiles) {
  TempDir dir;
  write_record_file(dir.file("train.rec"), PatternSource(20, {2, 3, 4}, 6));
  EXPECT_EQ(error_of([&] { load_dataset("records:" + dir.path()); }),
            "data: records:" + dir.path() + ": folder " + dir.path() + " lacks test.rec");
  write_record_file(dir.file("test.rec"), PatternSource(7, {2, 3, 4}, 5));
  EXPECT_EQ(error_of([&] { load_dataset("records:" + dir.path()); }),
            "data: class counts differ: " + dir.file("train.rec") + " has 6 classes, " +
                dir.file("test.rec") + " has 5");
  write_record_file(dir.file("test.rec"), PatternSource(0, {2, 3, 4}, 6));
  EXPECT_EQ(error_of([&] { load_dataset("records:" + dir.path()); }),
            "data: records:" + dir.path() + ": " + dir.file("test.rec") + " holds no samples");
}

}  // namespace
}  // namespace saturate
