// SPDX-License-Identifier: Apache-2.0
#pragma once
// `saturate doctor`: checks the environment for what makes training slow or impossible (old
// LibTorch, no GPU, reference BLAS, capped threads, missing data) and says how to fix each.
//
//   for (const auto& c : saturate::run_doctor({}, saturate::probe_devices()))
//     std::cout << saturate::to_string(c.status) << "  " << c.name << ": " << c.detail << "\n";

#include <functional>
#include <string>
#include <vector>

#include "saturate/device/probe.h"

namespace saturate {

enum class CheckStatus { kOk, kWarn, kFail };

struct DoctorCheck {
  /// "libtorch", "cuda", "blas", "threads", "onednn", "precision", "allocator", "memory",
  /// "dataset"
  std::string name;
  CheckStatus status = CheckStatus::kOk;
  std::string detail;  ///< what was found, one line
  std::string fix;     ///< a command or flag that resolves it; empty when status is kOk
};

struct DoctorOptions {
  /// Time a 512x512 float32 matmul (about 0.1-0.5 s) and warn when it is far below what the
  /// usable cores should do.
  bool measure_gemm = true;
  /// Time faulting in 64 MiB of fresh memory (about 10-40 ms): what allocation churn costs.
  bool measure_page_faults = true;
  /// The data the run would use: "fashion-mnist" checks its folder (SATURATE_FASHION_MNIST_DIR,
  /// default /usr/share/datasets/fashion-mnist); any other spec goes to `check_data` when it
  /// is set (the data layer, above this one, opens it as train does); else "synthetic..."
  /// needs none and anything else is taken as a path that must exist.
  std::string data_spec = "fashion-mnist";
  std::function<DoctorCheck(const std::string& spec)> check_data;
};

/// Runs every check in a fixed order. Reads OMP_NUM_THREADS, MKL_NUM_THREADS,
/// SATURATE_CPU_CACHE and SATURATE_FASHION_MNIST_DIR from the environment; everything else comes from `probe`.
/// Never throws for what it finds: problems are checks with status kWarn or kFail.
std::vector<DoctorCheck> run_doctor(const DoctorOptions& options, const DeviceProbe& probe);

/// "ok" | "warn" | "fail".
std::string to_string(CheckStatus s);

}  // namespace saturate
