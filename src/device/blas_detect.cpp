// SPDX-License-Identifier: Apache-2.0
// Which BLAS does LibTorch's CPU matmul run on, and how fast is it. The build configuration
// (at::show_config) says what LibTorch was linked against; the mapped libraries say what the
// dynamic linker actually resolved, which for Debian's libblas.so.3 alternatives can be the
// reference BLAS: ~40x slower than OpenBLAS.
#include <ATen/Context.h>
#include <ATen/Version.h>
#include <limits.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/device/probe.h"

namespace saturate {
namespace {

enum class BlasFamily { kNone, kMkl, kOpenBlas, kBlis, kReference };

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

const char* family_name(BlasFamily f) {
  switch (f) {
    case BlasFamily::kMkl:
      return "MKL";
    case BlasFamily::kOpenBlas:
      return "OpenBLAS";
    case BlasFamily::kBlis:
      return "BLIS";
    case BlasFamily::kReference:
      return "reference BLAS";
    case BlasFamily::kNone:
      break;
  }
  return "unknown";
}

// "c" and "b" from "/a/b/c". String operations rather than std::filesystem: the torch wheel
// exports its own std::filesystem symbols, which crash against GCC 12's libstdc++.
std::string last_component(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
std::string parent_component(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : last_component(path.substr(0, slash));
}

// What one mapped library is, from its resolved path.
BlasFamily classify_library(const std::string& path) {
  const std::string base = lowercase(last_component(path));
  const std::string dir = lowercase(parent_component(path));
  // numpy's bundled OpenBLAS exports prefixed symbols (scipy_sgemm_...): LibTorch never binds
  // to it, so it says nothing about LibTorch's BLAS.
  if (base.find("scipy_openblas") != std::string::npos) return BlasFamily::kNone;
  if (starts_with(base, "libmkl")) return BlasFamily::kMkl;
  if (starts_with(base, "libopenblas")) return BlasFamily::kOpenBlas;
  if (starts_with(base, "libblis")) return BlasFamily::kBlis;
  if (starts_with(base, "libblas.so") || starts_with(base, "libcblas.so")) {
    // Debian installs each libblas.so.3 alternative in its own folder: openblas-pthread/,
    // openblas-openmp/, blis-openmp/, ... and the reference (netlib) one in blas/. Elsewhere a
    // plain libblas.so is the netlib reference too: optimised BLASes ship under their own names.
    if (starts_with(dir, "openblas")) return BlasFamily::kOpenBlas;
    if (starts_with(dir, "blis")) return BlasFamily::kBlis;
    if (dir.find("mkl") != std::string::npos) return BlasFamily::kMkl;
    return BlasFamily::kReference;
  }
  return BlasFamily::kNone;
}

// "mkl" from "... BLAS_INFO=mkl, ..."; "" when absent.
std::string build_setting(const std::string& config, const std::string& key) {
  const std::string needle = key + "=";
  size_t pos = 0;
  while ((pos = config.find(needle, pos)) != std::string::npos) {
    // Whole key only: "BLAS_INFO=" must not match inside "XBLAS_INFO=".
    if (pos == 0 || config[pos - 1] == ' ' || config[pos - 1] == ',' || config[pos - 1] == ':') {
      const size_t begin = pos + needle.size();
      const size_t end = config.find_first_of(",\n", begin);
      return trim(config.substr(begin, end == std::string::npos ? end : end - begin));
    }
    pos += needle.size();
  }
  return "";
}

BlasFamily family_from_build(const std::string& blas_info) {
  const std::string v = lowercase(blas_info);
  if (v == "mkl") return BlasFamily::kMkl;
  if (v == "open" || v == "openblas") return BlasFamily::kOpenBlas;
  if (v == "blis") return BlasFamily::kBlis;
  // "generic" means LibTorch links plain libblas.so.3: the mapped library decides.
  return BlasFamily::kNone;
}

// The show_config lines about BLAS, LAPACK and oneDNN, plus the matching build settings.
std::string blas_config_lines(const std::string& config) {
  std::vector<std::string> lines;
  std::istringstream in(config);
  std::string line;
  while (std::getline(in, line)) {
    std::string t = trim(line);
    if (starts_with(t, "- ")) t = t.substr(2);
    if (starts_with(t, "Build settings")) continue;  // one huge line; keys are picked below
    const std::string l = lowercase(t);
    if (l.find("blas") != std::string::npos || l.find("lapack") != std::string::npos ||
        l.find("math kernel library") != std::string::npos ||
        l.find("mkl-dnn") != std::string::npos || l.find("onednn") != std::string::npos) {
      lines.push_back(t);
    }
  }
  std::vector<std::string> settings;
  for (const char* key : {"BLAS_INFO", "LAPACK_INFO", "USE_MKL", "USE_MKLDNN"}) {
    const std::string v = build_setting(config, key);
    if (!v.empty()) settings.push_back(std::string(key) + "=" + v);
  }
  if (!settings.empty()) lines.push_back(join(settings, ", "));
  return join(lines, "\n");
}

// Paths of the shared objects mapped into this process, symlinks resolved, in map order.
std::vector<std::string> mapped_libraries() {
  std::vector<std::string> paths;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    const std::string deleted = " (deleted)";
    if (path.size() > deleted.size() &&
        path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0) {
      path.resize(path.size() - deleted.size());
    }
    if (path.find(".so") == std::string::npos) continue;
    // The kernel already lists resolved paths; realpath makes sure (and folds "..").
    char resolved[PATH_MAX];
    if (realpath(path.c_str(), resolved) != nullptr) path = resolved;
    if (std::find(paths.begin(), paths.end(), path) == paths.end()) paths.push_back(path);
  }
  return paths;
}

}  // namespace

BlasInfo classify_blas(const std::string& show_config,
                       const std::vector<std::string>& mapped_libraries) {
  BlasInfo info;
  info.build_config = blas_config_lines(show_config);
  info.has_onednn = build_setting(show_config, "USE_MKLDNN") == "ON" ||
                    show_config.find("MKL-DNN") != std::string::npos ||
                    show_config.find("oneDNN") != std::string::npos;

  const BlasFamily built = family_from_build(build_setting(show_config, "BLAS_INFO"));
  const std::string* chosen = nullptr;
  BlasFamily chosen_family = BlasFamily::kNone;
  auto pick = [&](auto&& wanted) {
    for (const auto& lib : mapped_libraries) {
      const BlasFamily f = classify_library(lib);
      if (f != BlasFamily::kNone && wanted(f)) {
        chosen = &lib;
        chosen_family = f;
        return true;
      }
    }
    return false;
  };
  // Prefer a library of the family LibTorch was built for; then a reference libblas.so.3, which
  // is what a "generic" LibTorch binds to when the alternative points there; then anything.
  if (built != BlasFamily::kNone) pick([&](BlasFamily f) { return f == built; });
  if (!chosen && built != BlasFamily::kMkl) {
    if (!pick([](BlasFamily f) { return f == BlasFamily::kReference; })) {
      pick([](BlasFamily) { return true; });
    }
  }

  if (chosen) {
    info.name = family_name(chosen_family);
    info.library_path = *chosen;
  } else {
    // Linked statically into LibTorch (MKL in the PyPI wheel), or nothing identifiable.
    info.name = family_name(built);
  }
  info.is_slow = info.name == family_name(BlasFamily::kReference);
  return info;
}

BlasInfo detect_blas() {
  BlasInfo info = classify_blas(at::show_config(), mapped_libraries());
  info.has_onednn = info.has_onednn || at::hasMKLDNN();
  return info;
}

double measure_gemm_gflops(int n, int repeats, c10::ScalarType dtype, const c10::Device& device) {
  SATURATE_CHECK(n >= 1 && repeats >= 1, "device: GEMM benchmark needs n >= 1 and repeats >= 1, ",
                 "got n=", n, ", repeats=", repeats);
  torch::NoGradGuard no_grad;
  const auto a = torch::rand({n, n}).to(device, dtype);
  const auto b = torch::rand({n, n}).to(device, dtype);
  auto c = torch::empty({n, n}, torch::TensorOptions().dtype(dtype).device(device));
  auto wait = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  torch::mm_out(c, a, b);  // warm-up: thread pool start, BLAS dispatch, page faults
  wait();
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    wait();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    seconds.push_back(std::max(elapsed.count(), 1e-9));
  }
  std::sort(seconds.begin(), seconds.end());
  const double median_s = seconds[seconds.size() / 2];
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  return flops / median_s / 1e9;
}

}  // namespace saturate
