// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/npy_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "data/file_bytes.h"
#include "saturate/core/error.h"

namespace saturate {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
// numpy pads the header so the data starts at a multiple of 64 bytes.
constexpr size_t kHeaderAlignment = 64;
constexpr size_t kMaxQuotedHeaderChars = 120;

struct TypeInfo {
  NpyType type;
  const char* code;  // the dtype string without its byte-order character
  const char* name;
  size_t size_bytes;
};
// In NpyType order.
constexpr TypeInfo kTypes[] = {
    {NpyType::kInt8, "i1", "int8", 1},   {NpyType::kUInt8, "u1", "uint8", 1},
    {NpyType::kInt16, "i2", "int16", 2}, {NpyType::kUInt16, "u2", "uint16", 2},
    {NpyType::kInt32, "i4", "int32", 4}, {NpyType::kUInt32, "u4", "uint32", 4},
    {NpyType::kInt64, "i8", "int64", 8}, {NpyType::kUInt64, "u8", "uint64", 8}};

const TypeInfo& type_info(NpyType type) {
  const auto i = static_cast<size_t>(type);
  SATURATE_ASSERT(i < std::size(kTypes) && kTypes[i].type == type, "unknown NpyType ", i);
  return kTypes[i];
}

bool is_host_little_endian() {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return false;
#else
  return true;
#endif
}

void swap_each_element(uint8_t* data, size_t num_bytes, size_t element_size) {
  if (element_size == 1) return;
  for (size_t i = 0; i + element_size <= num_bytes; i += element_size) {
    std::reverse(data + i, data + i + element_size);
  }
}

uint32_t read_le(const uint8_t* p, int num_bytes) {
  uint32_t v = 0;
  for (int i = num_bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

// The header as it appears in messages: printable ASCII only, long ones cut short.
std::string quote_header(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, kMaxQuotedHeaderChars)) {
    out += (c >= 0x20 && c < 0x7F) ? c : '?';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (text.size() > kMaxQuotedHeaderChars) out += "...";
  return out;
}

struct NpyHeader {
  std::string descr;
  bool is_fortran_order = false;
  std::vector<int64_t> shape;
};

// The header dict, a Python literal written by numpy's format module: string keys, and values
// that are strings, True/False or tuples of non-negative integers.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  NpyHeader parse() {
    NpyHeader header;
    bool has_descr = false, has_fortran_order = false, has_shape = false;
    expect('{');
    while (!consume('}')) {
      const std::string key = parse_string("a quoted key");
      expect(':');
      if ((key == "descr" && has_descr) || (key == "fortran_order" && has_fortran_order) ||
          (key == "shape" && has_shape)) {
        fail(detail::concat("duplicate key '", quote_header(key), "'"));
      }
      if (key == "descr") {
        skip_space();
        if (peek() == '[') fail("structured dtypes (a list as 'descr') are not supported");
        header.descr = parse_string("a dtype string such as '<i8' after 'descr'");
        has_descr = true;
      } else if (key == "fortran_order") {
        header.is_fortran_order = parse_bool();
        has_fortran_order = true;
      } else if (key == "shape") {
        header.shape = parse_shape();
        has_shape = true;
      } else {
        fail(detail::concat("unexpected key '", quote_header(key), "'"));
      }
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (pos_ != text_.size()) fail("text after the closing '}'");
    if (!has_descr || !has_fortran_order || !has_shape) {
      fail("the dict needs the keys 'descr', 'fortran_order' and 'shape'");
    }
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    detail::throw_error(detail::concat("npy: ", name_, ": malformed header: ", what,
                                       " (at character ", pos_, " of \"", quote_header(text_),
                                       "\")"));
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool consume(char c) {
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  void expect(char c) {
    if (!consume(c)) fail(detail::concat("expected '", c, "'"));
  }

  std::string parse_string(const char* what) {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(detail::concat("expected ", what));
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    if (value.find('\\') != std::string::npos) fail("escapes in strings are not supported");
    pos_ = end + 1;
    return value;
  }

  bool parse_bool() {
    skip_space();
    for (const auto& [word, value] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    fail("expected True or False after 'fortran_order'");
  }

  int64_t parse_dimension() {
    skip_space();
    if (peek() < '0' || peek() > '9') fail("expected a non-negative integer in 'shape'");
    int64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      const int digit = peek() - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        fail("a dimension in 'shape' exceeds 2^63 - 1");
      }
      value = value * 10 + digit;
      ++pos_;
    }
    if (peek() == 'L') ++pos_;  // Python 2 long literals, as old numpy wrote them
    return value;
  }

  std::vector<int64_t> parse_shape() {
    expect('(');
    std::vector<int64_t> shape;
    while (!consume(')')) {
      shape.push_back(parse_dimension());
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }

  std::string_view text_;
  size_t pos_ = 0;
  const std::string& name_;
};

struct ParsedDescr {
  NpyType type;
  bool is_little_endian;
};

ParsedDescr parse_descr(const std::string& descr, const std::string& name) {
  std::string_view rest = descr;
  bool is_little_endian = is_host_little_endian();
  if (!rest.empty() && (rest[0] == '<' || rest[0] == '>' || rest[0] == '|' || rest[0] == '=')) {
    if (rest[0] == '<') is_little_endian = true;
    if (rest[0] == '>') is_little_endian = false;
    rest.remove_prefix(1);
  }
  for (const TypeInfo& t : kTypes) {
    if (rest == t.code) return {t.type, is_little_endian};
  }
  SATURATE_CHECK(false, "npy: ", name, ": unsupported dtype '", quote_header(descr),
                 "'; saturate reads integer arrays (uint8 images such as '|u1', integer labels "
                 "such as '<i8')");
  return {};
}

// Bytes that `shape` describes, or nullopt past 2^63 - 1.
std::optional<uint64_t> checked_bytes(const std::vector<int64_t>& shape, size_t first_dim,
                                      size_t element_size) {
  uint64_t bytes = element_size;
  for (size_t i = first_dim; i < shape.size(); ++i) {
    const auto dim = static_cast<uint64_t>(shape[i]);
    if (dim != 0 && bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim) {
      return std::nullopt;
    }
    bytes *= dim;
  }
  return bytes;
}

// Labels of element type T (host byte order, possibly unaligned) as int64; `count` elements.
template <typename T>
std::vector<int64_t> convert_labels(const NpyArray& labels, size_t count, const std::string& name) {
  std::vector<int64_t> out(count);
  for (size_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, labels.data.data() + i * sizeof(T), sizeof(T));
    if constexpr (std::is_signed_v<T>) {
      SATURATE_CHECK(value >= 0, "npy: ", name, ": label of sample ", i, " is ", int64_t{value},
                     ", expected a class index >= 0");
    } else if constexpr (sizeof(T) == 8) {
      SATURATE_CHECK(value <= static_cast<T>(std::numeric_limits<int64_t>::max()), "npy: ", name,
                     ": label of sample ", i, " is above 2^63 - 1");
    }
    out[i] = static_cast<int64_t>(value);
  }
  return out;
}


}  // namespace

size_t npy_element_size(NpyType type) { return type_info(type).size_bytes; }

const char* npy_type_name(NpyType type) { return type_info(type).name; }

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& name) {
  SATURATE_CHECK(size >= kMagicBytes + 2 && std::memcmp(bytes, kMagic, kMagicBytes) == 0,
                 "npy: ", name,
                 ": not a .npy file: it does not start with \\x93NUMPY and a version");
  const int major = bytes[kMagicBytes], minor = bytes[kMagicBytes + 1];
  SATURATE_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, "npy: ", name,
                 ": unsupported .npy format version ", major, ".", minor,
                 ", expected 1.0, 2.0 or 3.0");
  const int length_bytes = major == 1 ? 2 : 4;
  const size_t prefix_bytes = kMagicBytes + 2 + static_cast<size_t>(length_bytes);
  SATURATE_CHECK(size >= prefix_bytes, "npy: ", name, ": truncated header: ", size,
                 " bytes, version ", major, ".0 needs ", prefix_bytes, " before the dict");
  const size_t header_length = read_le(bytes + kMagicBytes + 2, length_bytes);
  SATURATE_CHECK(header_length <= size - prefix_bytes, "npy: ", name,
                 ": truncated header: it claims ", header_length, " bytes, the file has ",
                 size - prefix_bytes, " after the ", prefix_bytes, "-byte prefix");

  const std::string_view text(reinterpret_cast<const char*>(bytes + prefix_bytes), header_length);
  const NpyHeader header = HeaderParser(text, name).parse();
  const ParsedDescr descr = parse_descr(header.descr, name);
  // Column-major order only differs from row-major when two or more dimensions exceed 1.
  const auto long_dims =
      std::count_if(header.shape.begin(), header.shape.end(), [](int64_t d) { return d > 1; });
  SATURATE_CHECK(!header.is_fortran_order || long_dims < 2, "npy: ", name,
                 ": fortran_order is True (column-major data), which is not supported; save "
                 "np.ascontiguousarray(x) instead");

  NpyArray array;
  array.type = descr.type;
  array.shape = header.shape;
  const size_t element_size = npy_element_size(array.type);
  const std::optional<uint64_t> needed = checked_bytes(array.shape, 0, element_size);
  SATURATE_CHECK(needed.has_value(), "npy: ", name, ": shape ", format_shape(array.shape),
                 " describes more than 2^63 bytes; the header is corrupt");
  const size_t data_offset = prefix_bytes + header_length;
  const uint64_t found = size - data_offset;
  if (found < *needed) {
    // The sample is the index along the first dimension: what a data set calls one image.
    const uint64_t sample_bytes =
        array.shape.empty() ? *needed : *checked_bytes(array.shape, 1, element_size);
    SATURATE_CHECK(false, "npy: ", name, ": truncated: shape ", format_shape(array.shape), " of ",
                   npy_type_name(array.type), " needs ", *needed, " bytes of data, found ", found,
                   "; sample ", found / sample_bytes, " is incomplete");
  }
  SATURATE_CHECK(found == *needed, "npy: ", name, ": ", found - *needed, " trailing bytes: shape ",
                 format_shape(array.shape), " of ", npy_type_name(array.type), " needs ", *needed,
                 " bytes of data, found ", found);

  array.data.assign(bytes + data_offset, bytes + size);
  if (descr.is_little_endian != is_host_little_endian()) {
    swap_each_element(array.data.data(), array.data.size(), element_size);
  }
  return array;
}

NpyArray read_npy(const std::string& path) {
  const std::vector<uint8_t> bytes = detail::read_file_bytes(path, "npy");
  return parse_npy(bytes.data(), bytes.size(), path);
}

void write_npy(const std::string& path, const NpyArray& array, int major_version) {
  SATURATE_CHECK(major_version >= 1 && major_version <= 3, "npy: ", path,
                 ": cannot write format version ", major_version, ", expected 1, 2 or 3");
  const size_t element_size = npy_element_size(array.type);
  const std::optional<uint64_t> needed = checked_bytes(array.shape, 0, element_size);
  SATURATE_CHECK(needed.has_value() && *needed == array.data.size(), "npy: ", path,
                 ": cannot write: shape ", format_shape(array.shape), " of ",
                 npy_type_name(array.type), " needs ",
                 needed ? std::to_string(*needed) : std::string("over 2^63"),
                 " bytes of data, have ", array.data.size());

  const std::string descr =
      detail::concat(element_size == 1 ? '|' : '<', type_info(array.type).code);
  std::string header =
      detail::concat("{'descr': '", descr,
                     "', 'fortran_order': False, 'shape': ", format_shape(array.shape), ", }");
  const size_t length_bytes = major_version == 1 ? 2 : 4;
  const size_t prefix_bytes = kMagicBytes + 2 + length_bytes;
  const size_t unpadded = prefix_bytes + header.size() + 1;  // + the closing newline
  header.append((kHeaderAlignment - unpadded % kHeaderAlignment) % kHeaderAlignment, ' ');
  header += '\n';
  SATURATE_CHECK(major_version != 1 || header.size() <= 0xFFFF, "npy: ", path,
                 ": the header needs ", header.size(),
                 " bytes, over version 1.0's 65535; write "
                 "version 2");

  std::vector<uint8_t> bytes(kMagic, kMagic + kMagicBytes);
  bytes.push_back(static_cast<uint8_t>(major_version));
  bytes.push_back(0);
  for (size_t i = 0; i < length_bytes; ++i) {
    bytes.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  }
  bytes.insert(bytes.end(), header.begin(), header.end());
  const size_t data_offset = bytes.size();
  bytes.insert(bytes.end(), array.data.begin(), array.data.end());
  if (!is_host_little_endian()) {
    swap_each_element(bytes.data() + data_offset, array.data.size(), element_size);
  }

  std::FILE* file = std::fopen(path.c_str(), "wb");
  SATURATE_CHECK(file != nullptr, "npy: ", path, ": cannot write: ", std::strerror(errno));
  const bool is_written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  const int write_errno = errno;
  if (!is_written) std::fclose(file);
  SATURATE_CHECK(is_written, "npy: ", path, ": write failed: ", std::strerror(write_errno));
  SATURATE_CHECK(std::fclose(file) == 0, "npy: ", path, ": write failed: ", std::strerror(errno));
}

std::array<int64_t, 4> npy_image_shape(const NpyArray& images, const std::string& name) {
  SATURATE_CHECK(images.type == NpyType::kUInt8, "npy: ", name,
                 ": images must be uint8 ('|u1'), "
                 "found ",
                 npy_type_name(images.type), "; convert with x.astype(np.uint8)");
  const std::vector<int64_t>& s = images.shape;
  SATURATE_CHECK(s.size() == 3 || s.size() == 4, "npy: ", name,
                 ": images must be shaped [N, H, W] or [N, C, H, W], found shape ",
                 format_shape(s));
  const auto is_channel_count = [](int64_t d) { return d == 1 || d == 3 || d == 4; };
  // [N, 32, 32, 3] is a valid NCHW shape too, so only the telltale pattern is refused: a last
  // dimension that looks like colour channels after a second one that cannot be.
  SATURATE_CHECK(s.size() == 3 || !is_channel_count(s[3]) || is_channel_count(s[1]), "npy: ", name,
                 ": shape ", format_shape(s),
                 " looks like [N, H, W, C] (channels last), which is not supported; save "
                 "np.ascontiguousarray(x.transpose(0, 3, 1, 2)) to get [N, C, H, W]");
  const std::array<int64_t, 4> nchw = s.size() == 3
                                          ? std::array<int64_t, 4>{s[0], 1, s[1], s[2]}
                                          : std::array<int64_t, 4>{s[0], s[1], s[2], s[3]};
  SATURATE_CHECK(nchw[1] > 0 && nchw[2] > 0 && nchw[3] > 0, "npy: ", name, ": shape ",
                 format_shape(s), " has empty images");
  return nchw;
}

std::vector<int64_t> npy_labels(const NpyArray& labels, const std::string& name) {
  SATURATE_CHECK(labels.shape.size() == 1, "npy: ", name, ": labels must be shaped [N], found ",
                 format_shape(labels.shape),
                 labels.shape.size() == 2 ? "; flatten with y.reshape(-1)" : "");
  const auto count = static_cast<size_t>(labels.shape[0]);
  switch (labels.type) {
    case NpyType::kInt8:
      return convert_labels<int8_t>(labels, count, name);
    case NpyType::kUInt8:
      return convert_labels<uint8_t>(labels, count, name);
    case NpyType::kInt16:
      return convert_labels<int16_t>(labels, count, name);
    case NpyType::kUInt16:
      return convert_labels<uint16_t>(labels, count, name);
    case NpyType::kInt32:
      return convert_labels<int32_t>(labels, count, name);
    case NpyType::kUInt32:
      return convert_labels<uint32_t>(labels, count, name);
    case NpyType::kInt64:
      return convert_labels<int64_t>(labels, count, name);
    case NpyType::kUInt64:
      return convert_labels<uint64_t>(labels, count, name);
  }
  SATURATE_ASSERT(false, "unknown NpyType ", static_cast<int>(labels.type));
  return {};
}

}  // namespace saturate
