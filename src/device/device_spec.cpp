// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/device_spec.h"

#include <algorithm>
#include <cctype>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"

namespace saturate {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Digits only: std::stoi would accept "+1", " 1" and "1x".
bool parse_ordinal(const std::string& digits, int* out) {
  if (digits.empty() || digits.size() > 9) return false;
  int value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  *out = value;
  return true;
}

[[noreturn]] void throw_unknown(const std::string& text) {
  // Suggest from the lowercased text so "CPU" and "Cuda" get a hint; "cuda:0" stands for the
  // cuda:N family. The accepted forms are already listed, so no hint when nothing is close.
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string hint;
  if (lower == "gpu" || lower.compare(0, 4, "gpu:") == 0) {
    hint = "; did you mean 'cuda'?";
  } else if (auto m = closest_match(lower, {"cuda", "cpu", "auto", "cuda:0"})) {
    hint = "; did you mean '" + *m + "'?";
  }
  detail::throw_error(detail::concat("device: unknown device '", text,
                                     "'; expected auto, cpu, cuda or cuda:N", hint));
}

}  // namespace

DeviceSpec DeviceSpec::parse(const std::string& text) {
  const std::string t = trim(text);
  DeviceSpec spec;
  if (t == "auto") return spec;
  if (t == "cpu") {
    spec.kind = DeviceKind::kCpu;
    return spec;
  }
  if (t == "cuda") {
    spec.kind = DeviceKind::kCuda;
    return spec;
  }
  const std::string prefix = "cuda:";
  if (t.compare(0, prefix.size(), prefix) == 0) {
    const std::string ordinal = t.substr(prefix.size());
    int index = 0;
    SATURATE_CHECK(parse_ordinal(ordinal, &index), "device: unknown device '", text,
                   "'; expected auto, cpu, cuda or cuda:N; '", ordinal,
                   "' is not a CUDA device number (0, 1, ...)");
    spec.kind = DeviceKind::kCuda;
    spec.index = index;
    return spec;
  }
  throw_unknown(text);
}

std::string DeviceSpec::to_string() const {
  switch (kind) {
    case DeviceKind::kAuto:
      return "auto";
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
  }
  return "auto";
}

}  // namespace saturate
