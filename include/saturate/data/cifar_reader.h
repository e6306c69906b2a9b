// SPDX-License-Identifier: Apache-2.0
#pragma once
// CIFAR-10 and CIFAR-100 in their "binary version": each file is a run of fixed-size records,
// a label byte (CIFAR-100: a coarse then a fine label byte) followed by 3072 pixel bytes, the
// 32x32 red, green and blue planes in that order. No LibTorch here, so the parser can be fuzzed.
//
//   saturate::CifarRecords test = saturate::read_cifar_files(
//       {"cifar-10-batches-bin/test_batch.bin"}, saturate::CifarKind::kCifar10);
//   // test.size() == 10000; test.pixels: 10000 x 3 x 32 x 32 bytes; test.labels in 0..9

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace saturate {

enum class CifarKind { kCifar10, kCifar100 };

constexpr int64_t kCifarChannels = 3;
constexpr int64_t kCifarHeight = 32;
constexpr int64_t kCifarWidth = 32;
constexpr int64_t kCifarImageBytes = kCifarChannels * kCifarHeight * kCifarWidth;

/// 3073 for CIFAR-10, 3074 for CIFAR-100.
size_t cifar_record_bytes(CifarKind kind);
/// 10 or 100 (CIFAR-100 is read with its fine labels).
int64_t cifar_num_classes(CifarKind kind);
/// File names of one split inside the data set's folder: data_batch_1.bin .. data_batch_5.bin
/// and test_batch.bin for CIFAR-10; train.bin and test.bin for CIFAR-100.
std::vector<std::string> cifar_split_files(CifarKind kind, bool is_train);

/// Decoded records: image i is pixels[i * kCifarImageBytes, (i + 1) * kCifarImageBytes),
/// channel-major (3 x 32 x 32), and labels[i] is its class (the fine label for CIFAR-100).
struct CifarRecords {
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

/// Decodes the records of one file held in memory; `name` (usually the path) appears in every
/// error. Throws saturate::Error "cifar: <name>: ..." for an empty buffer, a size that is not a
/// whole number of records (naming the index of the truncated record), or a label outside
/// 0..9 (CIFAR-10), 0..19 coarse or 0..99 fine (CIFAR-100), naming the record.
CifarRecords parse_cifar_records(const uint8_t* bytes, size_t size, CifarKind kind,
                                 const std::string& name);

/// Reads and concatenates the files in order (e.g. the five CIFAR-10 training batches). Throws
/// saturate::Error "cifar: <path>: ..." when a file cannot be read or parse_cifar_records
/// rejects it.
CifarRecords read_cifar_files(const std::vector<std::string>& paths, CifarKind kind);

}  // namespace saturate
