// SPDX-License-Identifier: Apache-2.0
#pragma once
// DeviceSpec: what the user asked for with --device ("auto", "cpu", "cuda", "cuda:N"), before it
// is resolved against the machine (see select_device in probe.h).
//
//   auto spec = saturate::DeviceSpec::parse("cuda:1");   // kind kCuda, index 1
//   spec.to_string();                                    // "cuda:1"

#include <string>

namespace saturate {

enum class DeviceKind { kAuto, kCpu, kCuda };

struct DeviceSpec {
  DeviceKind kind = DeviceKind::kAuto;
  /// CUDA ordinal; -1 when unspecified ("cuda" means cuda:0). Always -1 for kAuto and kCpu.
  int index = -1;

  /// Parses "auto" | "cpu" | "cuda" | "cuda:N" (N a non-negative decimal). Surrounding
  /// whitespace is ignored; anything else throws saturate::Error naming the text, the accepted
  /// forms and the closest one.
  static DeviceSpec parse(const std::string& text);
  /// The canonical text, which parse() reads back: "auto", "cpu", "cuda" or "cuda:N".
  std::string to_string() const;
};

}  // namespace saturate
