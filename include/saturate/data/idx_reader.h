// SPDX-License-Identifier: Apache-2.0
#pragma once
// IDX files (the MNIST format): a 4-byte magic (0, 0, type code, number of dimensions), the
// dimensions as big-endian uint32, then the elements big-endian in row-major order.
// Files may be plain or gzip-compressed; errors name the file and say what is wrong.
//
//   saturate::IdxArray images = saturate::read_idx("train-images-idx3-ubyte.gz");
//   // images.type == IdxType::kUInt8, images.dims == {60000, 28, 28}

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace saturate {

/// Element type, numbered by its IDX type code (the magic's third byte).
enum class IdxType : uint8_t {
  kUInt8 = 0x08,
  kInt8 = 0x09,
  kInt16 = 0x0B,
  kInt32 = 0x0C,
  kFloat32 = 0x0D,
  kFloat64 = 0x0E
};

/// Bytes per element: 1, 1, 2, 4, 4 or 8.
size_t idx_element_size(IdxType type);

/// A parsed IDX array. `data` holds numel() * idx_element_size(type) bytes in host byte order.
struct IdxArray {
  IdxType type = IdxType::kUInt8;
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
  /// Product of dims; 0 when dims is empty (IDX has no scalars).
  int64_t numel() const;
};

/// Parses an IDX image held in memory; `name` (usually the path) starts every error message.
/// Safe on any input: a header that claims more data than `size` allows is rejected before
/// anything is allocated. Throws saturate::Error "<name>: <what is wrong>" on a bad magic,
/// 0 or more than 4 dimensions, a zero dimension, a size that overflows, truncated data or
/// trailing bytes.
IdxArray parse_idx(const uint8_t* bytes, size_t size, const std::string& name);

/// Reads a plain or gzip-compressed IDX file (zlib detects which). Throws saturate::Error
/// "<path>: <what is wrong>" when the file is missing or unreadable, the gzip stream is corrupt
/// or truncated (with zlib's message), or parse_idx rejects the contents.
IdxArray read_idx(const std::string& path);

/// Writes `array` as an IDX file, gzip-compressed when `gzip` is set, replacing `path`.
/// Throws saturate::Error naming the path when the array is inconsistent (1 to 4 dims, each in
/// 1..2^32-1, data size matching) or the file cannot be written.
void write_idx(const std::string& path, const IdxArray& array, bool gzip);

}  // namespace saturate
