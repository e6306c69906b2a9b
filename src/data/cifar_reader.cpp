// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/cifar_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "data/file_bytes.h"
#include "saturate/core/error.h"

namespace saturate {
namespace {

constexpr int64_t kCifar100CoarseClasses = 20;

const char* kind_name(CifarKind kind) {
  return kind == CifarKind::kCifar10 ? "CIFAR-10" : "CIFAR-100";
}

// Decodes every record of `bytes` onto the end of `out`.
void append_records(const uint8_t* bytes, size_t size, CifarKind kind, const std::string& name,
                    CifarRecords& out) {
  const size_t record_bytes = cifar_record_bytes(kind);
  SATURATE_CHECK(size > 0, "cifar: ", name, ": empty file, expected ", kind_name(kind),
                 " records of ", record_bytes, " bytes");
  if (size % record_bytes != 0) {
    // A file of the other kind is the likeliest cause; say so when the size fits it.
    const CifarKind other =
        kind == CifarKind::kCifar10 ? CifarKind::kCifar100 : CifarKind::kCifar10;
    const size_t other_bytes = cifar_record_bytes(other);
    SATURATE_CHECK(false, "cifar: ", name, ": truncated at record ", size / record_bytes, " (",
                   size, " bytes; records are ", record_bytes, ")",
                   size % other_bytes == 0
                       ? detail::concat("; the size is a whole number of ", other_bytes, "-byte ",
                                        kind_name(other), " records")
                       : std::string());
  }
  const size_t count = size / record_bytes;
  const size_t label_bytes = record_bytes - kCifarImageBytes;
  const int64_t num_classes = cifar_num_classes(kind);
  const size_t first_pixel = out.pixels.size();
  out.pixels.resize(first_pixel + count * kCifarImageBytes);
  out.labels.reserve(out.labels.size() + count);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* record = bytes + i * record_bytes;
    if (kind == CifarKind::kCifar100) {
      SATURATE_CHECK(record[0] < kCifar100CoarseClasses, "cifar: ", name, ": record ", i,
                     " has coarse label ", int{record[0]}, ", expected 0..",
                     kCifar100CoarseClasses - 1);
    }
    const int64_t label = record[label_bytes - 1];
    SATURATE_CHECK(label < num_classes, "cifar: ", name, ": record ", i, " has ",
                   kind == CifarKind::kCifar100 ? "fine label " : "label ", label, ", expected 0..",
                   num_classes - 1);
    out.labels.push_back(label);
    std::memcpy(out.pixels.data() + first_pixel + i * kCifarImageBytes, record + label_bytes,
                kCifarImageBytes);
  }
}


}  // namespace

size_t cifar_record_bytes(CifarKind kind) {
  return (kind == CifarKind::kCifar10 ? 1 : 2) + static_cast<size_t>(kCifarImageBytes);
}

int64_t cifar_num_classes(CifarKind kind) { return kind == CifarKind::kCifar10 ? 10 : 100; }

std::vector<std::string> cifar_split_files(CifarKind kind, bool is_train) {
  if (kind == CifarKind::kCifar100) return {is_train ? "train.bin" : "test.bin"};
  if (!is_train) return {"test_batch.bin"};
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
          "data_batch_5.bin"};
}

CifarRecords parse_cifar_records(const uint8_t* bytes, size_t size, CifarKind kind,
                                 const std::string& name) {
  CifarRecords records;
  append_records(bytes, size, kind, name, records);
  return records;
}

CifarRecords read_cifar_files(const std::vector<std::string>& paths, CifarKind kind) {
  // Reserving the total up front keeps 150 MB of training pixels from being copied on growth.
  size_t total_records = 0;
  for (const std::string& path : paths) {
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && info.st_size > 0) {
      total_records += static_cast<size_t>(info.st_size) / cifar_record_bytes(kind);
    }
  }
  CifarRecords records;
  records.pixels.reserve(total_records * kCifarImageBytes);
  records.labels.reserve(total_records);
  for (const std::string& path : paths) {
    const std::vector<uint8_t> bytes = detail::read_file_bytes(path, "cifar");
    append_records(bytes.data(), bytes.size(), kind, path, records);
  }
  return records;
}

}  // namespace saturate
