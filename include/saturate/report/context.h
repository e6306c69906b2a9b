// SPDX-License-Identifier: Apache-2.0
#pragma once
// The context block every summary, plan and report starts with: which machine, device, LibTorch,
// BLAS and saturate revision produced the numbers (google/benchmark's "context").
//
//   nlohmann::json ctx = saturate::run_context(probe, "cpu");

#include <string>

#include <nlohmann/json.hpp>

namespace saturate {

struct DeviceProbe;

/// host, date (UTC, ISO 8601), cpu, cores, memory, device (and GPU name when on CUDA), torch
/// version, BLAS, intra-op threads, saturate version, git sha, build type, CUDA build flag.
nlohmann::json run_context(const DeviceProbe& probe, const std::string& device);

}  // namespace saturate
