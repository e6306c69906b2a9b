// SPDX-License-Identifier: Apache-2.0
#pragma once
// NumPy .npy files, format versions 1.0, 2.0 and 3.0: the magic "\x93NUMPY", a major and a minor
// version byte, the little-endian length of the header (2 bytes in 1.0, 4 after), the header (a
// Python dict literal such as {'descr': '<i8', 'fortran_order': False, 'shape': (60000,), })
// and then the elements. Integer element types only: uint8 images and integer labels.
// No LibTorch here, so the parser can be fuzzed.
//
//   saturate::NpyArray x = saturate::read_npy("train_x.npy");
//   std::array<int64_t, 4> nchw = saturate::npy_image_shape(x, "train_x.npy");  // {N, C, H, W}
//   std::vector<int64_t> y = saturate::npy_labels(saturate::read_npy("train_y.npy"),
//   "train_y.npy");

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace saturate {

enum class NpyType : uint8_t { kInt8, kUInt8, kInt16, kUInt16, kInt32, kUInt32, kInt64, kUInt64 };

/// Bytes per element: 1, 2, 4 or 8.
size_t npy_element_size(NpyType type);
/// "uint8", "int64", ...
const char* npy_type_name(NpyType type);

/// A parsed array in C (row-major) order. `data` holds numel() * npy_element_size(type) bytes in
/// host byte order.
struct NpyArray {
  NpyType type = NpyType::kUInt8;
  std::vector<int64_t> shape;  ///< empty for a 0-dimensional array
  std::vector<uint8_t> data;
  /// Product of shape (1 for a 0-dimensional array).
  int64_t numel() const;
};

/// Parses a .npy image held in memory; `name` (usually the path) appears in every error. Safe on
/// any input: nothing is allocated before the header's claimed size is checked against `size`.
/// Throws saturate::Error "npy: <name>: ..." for a bad magic, a version other than 1.0/2.0/3.0,
/// a truncated or malformed header, a dtype that is not an integer type (floats, bools and
/// structured dtypes are named as unsupported), fortran_order True on a multi-dimensional
/// array, a shape whose size overflows, data shorter than the shape needs (bytes expected and
/// found, and the first incomplete sample, i.e. index along the first dimension) or trailing
/// bytes.
NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& name);

/// Reads and parses a .npy file. Throws saturate::Error "npy: <path>: ..." when it cannot be
/// read or parse_npy rejects it.
NpyArray read_npy(const std::string& path);

/// Writes `array` as a .npy file of format version `major_version` (1, 2 or 3; 1 keeps the
/// header under 64 KiB), little-endian, replacing `path`. Throws saturate::Error naming the path
/// when the data size does not match the shape or the file cannot be written.
void write_npy(const std::string& path, const NpyArray& array, int major_version = 1);

/// {N, C, H, W} of an image array: uint8 shaped [N, H, W] (C = 1) or [N, C, H, W]. Throws
/// saturate::Error "npy: <name>: ..." for another dtype, another rank, a zero C, H or W, or a
/// 4-dimensional shape that looks channels-last ([N, H, W, C] is not supported; the message
/// says how to transpose).
std::array<int64_t, 4> npy_image_shape(const NpyArray& images, const std::string& name);

/// The labels of a 1-dimensional integer array, as int64. Throws saturate::Error
/// "npy: <name>: ..." for another rank, or a label that is negative or above 2^63 - 1 (naming
/// the sample).
std::vector<int64_t> npy_labels(const NpyArray& labels, const std::string& name);

}  // namespace saturate
