// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/idx_reader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "saturate/core/error.h"

namespace saturate {
namespace {

constexpr size_t kMagicBytes = 4;
constexpr int kMaxDims = 4;
constexpr size_t kReadChunkBytes = size_t{1} << 20;

bool is_known_type(uint8_t code) {
  switch (static_cast<IdxType>(code)) {
    case IdxType::kUInt8:
    case IdxType::kInt8:
    case IdxType::kInt16:
    case IdxType::kInt32:
    case IdxType::kFloat32:
    case IdxType::kFloat64:
      return true;
  }
  return false;
}

std::string format_dims(const std::vector<int64_t>& dims) {
  std::string out;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += " x ";
    out += std::to_string(dims[i]);
  }
  return out;
}

std::string hex_byte(uint8_t b) {
  static const char* kDigits = "0123456789abcdef";
  return {kDigits[b >> 4], kDigits[b & 0xF]};
}

// IDX stores elements big-endian; swapping each element in place converts between file order
// and host order in either direction.
void swap_to_or_from_big_endian(uint8_t* data, size_t num_bytes, size_t element_size) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  (void)data;
  (void)num_bytes;
  (void)element_size;
#else
  if (element_size == 1) return;
  for (size_t i = 0; i + element_size <= num_bytes; i += element_size) {
    std::reverse(data + i, data + i + element_size);
  }
#endif
}

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void append_be32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

// Bytes of element data that `dims` describe, or nullopt when that exceeds 2^63 - 1 (four
// dimensions below 2^32 each can overflow 64 bits). Dims must be positive.
std::optional<uint64_t> checked_data_bytes(const std::vector<int64_t>& dims, size_t element_size) {
  uint64_t bytes = element_size;
  for (int64_t d : dims) {
    const auto dim = static_cast<uint64_t>(d);
    if (bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim) {
      return std::nullopt;
    }
    bytes *= dim;
  }
  return bytes;
}

// zlib's description of the stream's error state, or strerror when the failure was a system call.
std::string gz_error_message(gzFile file, int* errnum) {
  const char* message = gzerror(file, errnum);
  if (*errnum == Z_ERRNO) return std::strerror(errno);
  return message ? message : "unknown zlib error";
}

}  // namespace

size_t idx_element_size(IdxType type) {
  switch (type) {
    case IdxType::kUInt8:
    case IdxType::kInt8:
      return 1;
    case IdxType::kInt16:
      return 2;
    case IdxType::kInt32:
    case IdxType::kFloat32:
      return 4;
    case IdxType::kFloat64:
      return 8;
  }
  SATURATE_ASSERT(false, "unknown IdxType ", static_cast<int>(type));
  return 0;
}

int64_t IdxArray::numel() const {
  if (dims.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

IdxArray parse_idx(const uint8_t* bytes, size_t size, const std::string& name) {
  SATURATE_CHECK(size >= kMagicBytes, name, ": too short for an IDX header (", size,
                 " bytes, need at least ", kMagicBytes, ")");
  SATURATE_CHECK(bytes[0] == 0 && bytes[1] == 0 && is_known_type(bytes[2]), name,
                 ": not an IDX file: magic bytes are ", hex_byte(bytes[0]), " ", hex_byte(bytes[1]),
                 " ", hex_byte(bytes[2]), " ", hex_byte(bytes[3]),
                 ", expected 00 00 <type 08|09|0b|0c|0d|0e> <dimensions>");
  const int num_dims = bytes[3];
  SATURATE_CHECK(num_dims >= 1 && num_dims <= kMaxDims, name, ": IDX header says ", num_dims,
                 " dimensions, expected 1 to ", kMaxDims);
  const size_t header_bytes = kMagicBytes + 4 * static_cast<size_t>(num_dims);
  SATURATE_CHECK(size >= header_bytes, name, ": truncated IDX header: ", num_dims,
                 " dimensions need ", header_bytes, " header bytes, found ", size);

  IdxArray array;
  array.type = static_cast<IdxType>(bytes[2]);
  const size_t element_size = idx_element_size(array.type);
  for (int i = 0; i < num_dims; ++i) {
    array.dims.push_back(read_be32(bytes + kMagicBytes + 4 * static_cast<size_t>(i)));
  }
  // Validate the size the header claims before allocating anything: a lying header must not
  // make us reserve gigabytes (each dim is < 2^32, so four of them can overflow 64 bits).
  for (int i = 0; i < num_dims; ++i) {
    SATURATE_CHECK(array.dims[i] > 0, name, ": dimension ", i, " is 0 (dims ",
                   format_dims(array.dims), "), expected every dimension >= 1");
  }
  const std::optional<uint64_t> claimed_bytes = checked_data_bytes(array.dims, element_size);
  SATURATE_CHECK(claimed_bytes.has_value(), name, ": dims ", format_dims(array.dims),
                 " describe more than 2^63 bytes; the header is corrupt");
  const uint64_t data_bytes = *claimed_bytes;
  const uint64_t found_bytes = size - header_bytes;
  SATURATE_CHECK(found_bytes >= data_bytes, name, ": truncated: expected ", data_bytes,
                 " bytes of data after the header, found ", found_bytes);
  SATURATE_CHECK(found_bytes == data_bytes, name, ": ", found_bytes - data_bytes,
                 " trailing bytes: expected ", data_bytes,
                 " bytes of data after the header, found ", found_bytes);

  array.data.assign(bytes + header_bytes, bytes + size);
  swap_to_or_from_big_endian(array.data.data(), array.data.size(), element_size);
  return array;
}

IdxArray read_idx(const std::string& path) {
  // POSIX stat rather than std::filesystem: LibTorch wheels export their own copies of the
  // std::filesystem functions, built against a newer libstdc++, and those win symbol resolution.
  struct stat info {};
  SATURATE_CHECK(::stat(path.c_str(), &info) == 0, path, ": cannot open: ", std::strerror(errno));
  SATURATE_CHECK(!S_ISDIR(info.st_mode), path, ": is a folder, expected an IDX file");

  // gzopen reads plain files unchanged, so one path serves both forms.
  gzFile file = gzopen(path.c_str(), "rb");
  SATURATE_CHECK(file != nullptr, path, ": cannot open: ", std::strerror(errno));
  gzbuffer(file, 1 << 17);
  std::vector<uint8_t> bytes;
  for (;;) {
    const size_t old_size = bytes.size();
    bytes.resize(old_size + kReadChunkBytes);
    const int n = gzread(file, bytes.data() + old_size, static_cast<unsigned>(kReadChunkBytes));
    if (n < 0) {
      int errnum = 0;
      const std::string message = gz_error_message(file, &errnum);
      gzclose(file);
      SATURATE_CHECK(errnum != Z_DATA_ERROR, path, ": corrupt gzip data: ", message);
      SATURATE_CHECK(false, path, ": cannot read: ", message);
    }
    bytes.resize(old_size + static_cast<size_t>(n));
    if (n == 0) break;
  }
  // At end of input zlib reports Z_BUF_ERROR when the file stopped in the middle of a gzip stream.
  int errnum = 0;
  const std::string message = gz_error_message(file, &errnum);
  gzclose(file);
  SATURATE_CHECK(errnum == Z_OK, path, ": gzip data is truncated or corrupt: ", message);
  return parse_idx(bytes.data(), bytes.size(), path);
}

void write_idx(const std::string& path, const IdxArray& array, bool gzip) {
  SATURATE_CHECK(is_known_type(static_cast<uint8_t>(array.type)), path,
                 ": cannot write IDX: unknown type code ", static_cast<int>(array.type));
  const int num_dims = static_cast<int>(array.dims.size());
  SATURATE_CHECK(num_dims >= 1 && num_dims <= kMaxDims, path, ": cannot write IDX with ", num_dims,
                 " dimensions, expected 1 to ", kMaxDims);
  for (int64_t d : array.dims) {
    SATURATE_CHECK(d >= 1 && d <= int64_t{std::numeric_limits<uint32_t>::max()}, path,
                   ": cannot write IDX: dimension ", d, " is outside 1..4294967295 (dims ",
                   format_dims(array.dims), ")");
  }
  const size_t element_size = idx_element_size(array.type);
  const std::optional<uint64_t> expected_bytes = checked_data_bytes(array.dims, element_size);
  SATURATE_CHECK(expected_bytes.has_value() && array.data.size() == *expected_bytes, path,
                 ": cannot write IDX: dims ", format_dims(array.dims), " need ",
                 expected_bytes ? std::to_string(*expected_bytes) : std::string("over 2^63"),
                 " bytes of data, have ", array.data.size());

  std::vector<uint8_t> bytes = {0, 0, static_cast<uint8_t>(array.type),
                                static_cast<uint8_t>(num_dims)};
  for (int64_t d : array.dims) append_be32(bytes, static_cast<uint32_t>(d));
  const size_t header_bytes = bytes.size();
  bytes.insert(bytes.end(), array.data.begin(), array.data.end());
  swap_to_or_from_big_endian(bytes.data() + header_bytes, array.data.size(), element_size);

  if (gzip) {
    gzFile file = gzopen(path.c_str(), "wb");
    SATURATE_CHECK(file != nullptr, path, ": cannot write: ", std::strerror(errno));
    size_t done = 0;
    while (done < bytes.size()) {
      const auto n = static_cast<unsigned>(std::min<size_t>(bytes.size() - done, 1u << 30));
      if (gzwrite(file, bytes.data() + done, n) != static_cast<int>(n)) {
        int errnum = 0;
        const std::string message = gz_error_message(file, &errnum);
        gzclose(file);
        SATURATE_CHECK(false, path, ": write failed: ", message);
      }
      done += n;
    }
    SATURATE_CHECK(gzclose(file) == Z_OK, path, ": write failed: ", std::strerror(errno));
    return;
  }
  std::FILE* file = std::fopen(path.c_str(), "wb");
  SATURATE_CHECK(file != nullptr, path, ": cannot write: ", std::strerror(errno));
  const bool is_written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  const int write_errno = errno;
  if (!is_written) std::fclose(file);
  SATURATE_CHECK(is_written, path, ": write failed: ", std::strerror(write_errno));
  SATURATE_CHECK(std::fclose(file) == 0, path, ": write failed: ", std::strerror(errno));
}

}  // namespace saturate
