// SPDX-License-Identifier: Apache-2.0
#include "saturate/models/saved_model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "saturate/core/atomic_file.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"

namespace saturate {
namespace {

using detail::concat;
using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr const char* kFormat = "saturate-model-1";

struct DtypeName {
  at::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {{at::kFloat, "F32"},  {at::kHalf, "F16"},  {at::kBFloat16, "BF16"},
                                 {at::kDouble, "F64"}, {at::kLong, "I64"},  {at::kInt, "I32"},
                                 {at::kByte, "U8"},    {at::kBool, "BOOL"}};

const char* dtype_name(at::ScalarType t) {
  for (const DtypeName& d : kDtypes)
    if (d.type == t) return d.name;
  return nullptr;
}

bool dtype_of(const std::string& name, at::ScalarType& t) {
  for (const DtypeName& d : kDtypes)
    if (name == d.name) {
      t = d.type;
      return true;
    }
  return false;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// One tensor of the file, checked against the file's size.
struct Entry {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // within the data part
};

struct Parsed {
  json metadata;
  std::map<std::string, Entry> entries;
  uint64_t data_start = 0;
};

Parsed parse(const std::string& path, int fd) {
  struct stat info {};
  SATURATE_CHECK(::fstat(fd, &info) == 0 && S_ISREG(info.st_mode), "model: ", path,
                 " is not a regular file");
  const auto size = static_cast<uint64_t>(info.st_size);
  uint8_t len_bytes[8];
  SATURATE_CHECK(size >= 8 && ::pread(fd, len_bytes, 8, 0) == 8, "model: ", path,
                 " is truncated (", size, " bytes): not a safetensors file");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  SATURATE_CHECK(n >= 2 && n <= kMaxHeaderBytes && n <= size - 8, "model: ", path,
                 ": header length ", n, " does not fit the file's ", size, " bytes");
  std::string header(n, '\0');
  SATURATE_CHECK(::pread(fd, header.data(), n, 8) == static_cast<ssize_t>(n), "model: ", path,
                 ": cannot read the header");
  Parsed p;
  p.data_start = 8 + n;
  json h;
  try {
    h = json::parse(header);
  } catch (const std::exception&) {
    SATURATE_CHECK(false, "model: ", path, ": the header is not JSON");
  }
  SATURATE_CHECK(h.is_object(), "model: ", path, ": the header is not a JSON object");
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      p.metadata = it.value();
      continue;
    }
    const json& t = it.value();
    Entry e;
    const bool shaped = t.is_object() && t.contains("dtype") && t["dtype"].is_string() &&
                        t.contains("shape") && t["shape"].is_array() &&
                        t.contains("data_offsets") && t["data_offsets"].is_array() &&
                        t["data_offsets"].size() == 2;
    SATURATE_CHECK(shaped && dtype_of(t["dtype"].get<std::string>(), e.dtype), "model: ", path,
                   ": tensor '", it.key(), "' has no dtype, shape and data_offsets it can read");
    uint64_t count = 1;
    for (const json& d : t["shape"]) {
      SATURATE_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= size, "model: ", path,
                     ": tensor '", it.key(), "' has a bad shape");
      e.shape.push_back(d.get<int64_t>());
      count *= d.get<uint64_t>();
      SATURATE_CHECK(count <= size, "model: ", path, ": tensor '", it.key(),
                     "' is larger than the file");
    }
    const json& o = t["data_offsets"];
    SATURATE_CHECK(o[0].is_number_unsigned() && o[1].is_number_unsigned(), "model: ", path,
                   ": tensor '", it.key(), "' has bad data_offsets");
    e.begin = o[0].get<uint64_t>();
    e.end = o[1].get<uint64_t>();
    const uint64_t bytes = count * c10::elementSize(e.dtype);
    SATURATE_CHECK(e.begin <= e.end && e.end <= size - p.data_start && e.end - e.begin == bytes,
                   "model: ", path, ": tensor '", it.key(), "' (", shape_text(e.shape),
                   ") does not match its data_offsets within the file");
    p.entries.emplace(it.key(), e);
  }
  return p;
}

std::string meta(const Parsed& p, const std::string& path, const char* key) {
  const json& m = p.metadata;
  SATURATE_CHECK(m.is_object() && m.contains(key) && m[key].is_string(), "model: ", path,
                 ": its metadata has no '", key, "' (a safetensors file saturate did not write?)");
  return m[key].get<std::string>();
}

int open_or_throw(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  SATURATE_CHECK(fd >= 0, "model: ", path, ": cannot open: ", std::strerror(errno));
  return fd;
}

}  // namespace

bool is_saved_model_path(const std::string& spec) {
  const std::string ext = ".safetensors";
  return spec.size() > ext.size() && spec.compare(spec.size() - ext.size(), ext.size(), ext) == 0;
}

void save_model(Model& model, const std::string& path, const SavedModelInfo& info,
                const std::vector<std::pair<std::string, at::Tensor>>* state) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  json header = json::object();
  std::string shape;
  for (size_t i = 0; i < info.sample_shape.size(); ++i)
    shape += (i ? "," : "") + std::to_string(info.sample_shape[i]);
  header["__metadata__"] = {{"format", kFormat},
                            {"saturate.model", info.model},
                            {"saturate.data", info.data},
                            {"saturate.sample_shape", shape},
                            {"saturate.num_classes", std::to_string(info.num_classes)},
                            {"saturate.input", info.tokens ? "tokens" : "images"},
                            {"saturate.normalize_mean", number_text(info.normalize_mean)},
                            {"saturate.normalize_std", number_text(info.normalize_std)},
                            {"saturate.steps", std::to_string(info.steps)}};
  uint64_t offset = 0;
  for (const auto& [name, t] : state != nullptr ? *state : model.named_state()) {
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const char* dtype = dtype_name(c.scalar_type());
    SATURATE_CHECK_RUN(dtype != nullptr, "--save-model: tensor '", name, "' has dtype ",
                       c.scalar_type(), ", which safetensors files here do not hold");
    std::vector<int64_t> dims(c.sizes().begin(), c.sizes().end());
    header[name] = {{"dtype", dtype}, {"shape", dims}, {"data_offsets", {offset, offset + c.nbytes()}}};
    offset += c.nbytes();
    tensors.emplace_back(name, c);
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // the data starts 8-byte aligned
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::vector<ByteRun> runs = {{len, 8}, {text.data(), text.size()}};
  for (const auto& [name, c] : tensors) runs.push_back({c.data_ptr(), c.nbytes()});
  const std::string why = write_file_atomically(path, runs);
  SATURATE_CHECK_RUN(why.empty(), "--save-model: cannot write ", path, ": ", why);
}

SavedModelInfo read_saved_model_info(const std::string& path) {
  const int fd = open_or_throw(path);
  Parsed p;
  try {
    p = parse(path, fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  SATURATE_CHECK(meta(p, path, "format") == kFormat, "model: ", path, ": format '",
                 meta(p, path, "format"), "', not ", kFormat);
  auto number = [&](const char* key, const std::string& text) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    SATURATE_CHECK(!text.empty() && end != nullptr && *end == '\0' && std::isfinite(v), "model: ",
                   path, ": metadata '", key, "' is '", text, "', not a number");
    return v;
  };
  auto field = [&](const char* key) { return number(key, meta(p, path, key)); };
  SavedModelInfo info;
  info.model = meta(p, path, "saturate.model");
  info.data = meta(p, path, "saturate.data");
  std::string dims = meta(p, path, "saturate.sample_shape");
  for (size_t at = 0; !dims.empty() && at != std::string::npos;) {
    const size_t comma = dims.find(',', at);
    const std::string d = dims.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    info.sample_shape.push_back(static_cast<int64_t>(number("saturate.sample_shape", d)));
    at = comma == std::string::npos ? comma : comma + 1;
  }
  info.num_classes = static_cast<int64_t>(field("saturate.num_classes"));
  info.tokens = meta(p, path, "saturate.input") == "tokens";
  info.normalize_mean = field("saturate.normalize_mean");
  info.normalize_std = field("saturate.normalize_std");
  info.steps = static_cast<int64_t>(field("saturate.steps"));
  return info;
}

void load_saved_weights(Model& model, const std::string& path) {
  const int fd = open_or_throw(path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const Parsed p = parse(path, fd);
  std::map<std::string, bool> used;
  at::NoGradGuard no_grad;
  for (auto& [name, t] : model.named_state()) {
    const auto it = p.entries.find(name);
    SATURATE_CHECK(it != p.entries.end(), "model: ", path, " has no tensor '", name, "' that ",
                   model.name(), " needs");
    const Entry& e = it->second;
    const std::vector<int64_t> want(t.sizes().begin(), t.sizes().end());
    SATURATE_CHECK(e.shape == want, "model: ", path, ": '", name, "' is ", shape_text(e.shape),
                   " in the file; ", model.name(), " on this data needs ", shape_text(want));
    at::Tensor host = torch::empty(want, at::TensorOptions().dtype(e.dtype));
    const auto n = static_cast<size_t>(e.end - e.begin);
    SATURATE_CHECK(n == 0 || ::pread(fd, host.data_ptr(), n, static_cast<off_t>(p.data_start + e.begin)) ==
                                 static_cast<ssize_t>(n),
                   "model: ", path, ": cannot read tensor '", name, "'");
    t.copy_(host);
    used[name] = true;
  }
  for (const auto& [name, e] : p.entries)
    SATURATE_CHECK(used.count(name) != 0, "model: ", path, " holds '", name, "', which ",
                   model.name(), " does not have");
}

}  // namespace saturate
