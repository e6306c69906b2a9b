// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/doctor.h"

#include <ATen/Parallel.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/device/cpu_budget.h"

namespace saturate {
namespace {

constexpr int kMinTorchMajor = 2;
constexpr int kMinTorchMinor = 4;

// A float32 GEMM slower than this per core means the BLAS is not an optimised one (or the CPU
// is shared with something busy). Measured with 512x512 on the 2-core development machine:
// Debian's reference BLAS ~5 GFLOP/s in total (~2.5 per core), OpenBLAS ~190 (~95 per core),
// the wheel's MKL 50-220 depending on what else runs. 10 per core is 4x the reference BLAS and
// stays clear of an optimised BLAS on a busy machine.
constexpr double kMinGemmGflopsPerCore = 10.0;
// A 512x512 matmul is too small to keep many more cores busy, so larger machines are not
// expected to scale past this many cores for the threshold (a deliberately lenient guess).
constexpr int kGemmMaxCoresExpected = 8;
constexpr int kGemmSize = 512;
constexpr int kGemmRepeats = 5;

// Below this the LibTorch libraries, a model and a decoded dataset compete for memory.
constexpr int64_t kMinRamBytes = int64_t{2} << 30;

constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
constexpr const char* kFashionMnistFiles[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

// stat rather than std::filesystem::exists: the torch wheel exports its own std::filesystem
// symbols, which crash against GCC 12's libstdc++.
bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

DoctorCheck make(const std::string& name, CheckStatus status, std::string detail,
                 std::string fix = "") {
  return DoctorCheck{name, status, std::move(detail), std::move(fix)};
}

DoctorCheck check_libtorch(const DeviceProbe& probe) {
  int major = 0, minor = 0;
  const bool parsed = std::sscanf(probe.torch_version.c_str(), "%d.%d", &major, &minor) == 2;
  const std::string fix =
      "install LibTorch >= 2.4: scripts/install-deps installs the pinned torch wheel";
  if (!parsed) {
    return make("libtorch", CheckStatus::kWarn,
                "cannot read the LibTorch version '" + probe.torch_version + "'", fix);
  }
  const bool new_enough =
      major > kMinTorchMajor || (major == kMinTorchMajor && minor >= kMinTorchMinor);
  if (!new_enough) {
    return make("libtorch", CheckStatus::kFail,
                "LibTorch " + probe.torch_version + " is older than 2.4", fix);
  }
  return make("libtorch", CheckStatus::kOk, "LibTorch " + probe.torch_version);
}

std::string describe_gpus(const DeviceProbe& probe) {
  std::vector<std::string> parts;
  for (const auto& g : probe.gpus) {
    std::string s = "cuda:" + std::to_string(g.index) + " " + g.name + " (" +
                    format_bytes(g.mem_total_bytes) + ", compute " + std::to_string(g.cc_major) +
                    "." + std::to_string(g.cc_minor);
    if (g.has_bf16) s += ", bf16";
    if (g.has_tf32) s += ", tf32";
    parts.push_back(s + ")");
  }
  std::string text = std::to_string(probe.gpus.size()) +
                     (probe.gpus.size() == 1 ? " GPU: " : " GPUs: ") + join(parts, "; ");
  if (!probe.cuda_runtime_version.empty()) text += "; CUDA " + probe.cuda_runtime_version;
  if (!probe.cudnn_version.empty()) text += ", cuDNN " + probe.cudnn_version;
  return text;
}

DoctorCheck check_cuda(const DeviceProbe& probe) {
  if (probe.cuda_available && !probe.gpus.empty()) {
    return make("cuda", CheckStatus::kOk, describe_gpus(probe));
  }
  const std::string reason = probe.cuda_unavailable_reason.empty()
                                 ? std::string("CUDA is not available")
                                 : probe.cuda_unavailable_reason;
  std::string fix;
  if (!probe.torch_has_cuda) {
    fix =
        "build against a CUDA-enabled LibTorch (the PyPI torch wheel that "
        "scripts/install-deps installs) to train on a GPU";
  } else if (reason.rfind("no NVIDIA driver", 0) == 0) {
    fix =
        "install the NVIDIA driver (nvidia-smi must list the GPU) to train on a GPU; on a "
        "machine without one this warning is expected";
  } else {
    fix = "check that nvidia-smi lists the GPU and that CUDA_VISIBLE_DEVICES does not hide it";
  }
  return make("cuda", CheckStatus::kWarn, reason + "; training runs on CPU", fix);
}

DoctorCheck check_blas(const DoctorOptions& options, const DeviceProbe& probe) {
  const BlasInfo& blas = probe.blas;
  std::string what;
  if (blas.name.empty() || blas.name == "unknown") {
    what = blas.library_path.empty() ? "an unidentified BLAS" : blas.library_path;
  } else {
    what = blas.name +
           (blas.library_path.empty() ? " (built into LibTorch)" : " (" + blas.library_path + ")");
  }
  if (blas.name == "reference BLAS") {
    return make("blas", CheckStatus::kFail,
                what + ": the unoptimised netlib BLAS makes CPU matmuls ~40x slower",
                "reference BLAS is loaded: install libopenblas0-openmp (apt-get install "
                "libopenblas0-openmp) or select it with update-alternatives --config "
                "libblas.so.3-x86_64-linux-gnu");
  }
  if (!options.measure_gemm) return make("blas", CheckStatus::kOk, what);

  const int usable = std::max(probe.cpu.cores_usable, 1);
  const int threads = std::clamp(at::get_num_threads(), 1, usable);
  const double gflops = measure_gemm_gflops(kGemmSize, kGemmRepeats);
  const double expected = kMinGemmGflopsPerCore * std::min(threads, kGemmMaxCoresExpected);
  const std::string measured = format_fixed(gflops, 1) + " GFLOP/s for a " +
                               std::to_string(kGemmSize) + "x" + std::to_string(kGemmSize) +
                               " float32 matmul on " + std::to_string(threads) + " thread" +
                               (threads == 1 ? "" : "s");
  if (gflops < expected || blas.is_slow) {
    return make(
        "blas", CheckStatus::kWarn,
        what + ": " + measured + ", below the expected minimum of " + format_fixed(expected, 0),
        "check that no other process keeps the CPU busy (top), and that LibTorch uses "
        "an optimised BLAS (MKL or OpenBLAS: apt-get install libopenblas0-openmp)");
  }
  return make("blas", CheckStatus::kOk, what + ": " + measured);
}

// The value of a thread-count variable when it is a positive integer; 0 otherwise.
int env_threads(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (end != v && *end == '\0' && n > 0 && n < 1 << 20) ? static_cast<int>(n) : 0;
}

DoctorCheck check_threads(const DeviceProbe& probe) {
  const int usable = std::max(probe.cpu.cores_usable, 1);
  std::vector<std::string> problems, fixes;
  if (probe.intra_op_threads < usable) {
    problems.push_back("LibTorch uses " + std::to_string(probe.intra_op_threads) +
                       " intra-op thread" + (probe.intra_op_threads == 1 ? "" : "s") + " but " +
                       std::to_string(usable) + " cores are usable");
    fixes.push_back("pass --threads " + std::to_string(usable) +
                    " (or --threads 0 for one per usable core)");
  } else if (probe.intra_op_threads > usable) {
    problems.push_back("LibTorch uses " + std::to_string(probe.intra_op_threads) +
                       " intra-op threads on " + std::to_string(usable) +
                       " usable cores, so they time-share");
    fixes.push_back("pass --threads " + std::to_string(usable));
  }
  for (const char* var : {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}) {
    const int n = env_threads(var);
    if (n > 0 && n < usable) {
      problems.push_back(std::string(var) + "=" + std::to_string(n) + " caps the CPU kernels at " +
                         std::to_string(n) + " of " + std::to_string(usable) + " usable cores");
      fixes.push_back(std::string("unset ") + var);
    }
  }
  if (problems.empty()) {
    return make("threads", CheckStatus::kOk,
                std::to_string(probe.intra_op_threads) + " intra-op and " +
                    std::to_string(probe.inter_op_threads) + " inter-op threads on " +
                    std::to_string(usable) + " usable cores");
  }
  return make("threads", CheckStatus::kWarn, join(problems, "; "), join(fixes, "; "));
}

DoctorCheck check_onednn(const DeviceProbe& probe) {
  if (probe.blas.has_onednn) {
    return make("onednn", CheckStatus::kOk, "oneDNN is built into LibTorch");
  }
  return make("onednn", CheckStatus::kWarn,
              "LibTorch has no oneDNN: CPU convolutions fall back to slower kernels",
              "use a LibTorch built with oneDNN, such as the PyPI torch wheel that "
              "scripts/install-deps installs");
}

DoctorCheck check_memory(const DeviceProbe& probe) {
  const int64_t total = probe.cpu.mem_total_bytes;
  if (total <= 0) {
    return make("memory", CheckStatus::kWarn, "cannot read the total RAM",
                "check that /proc/meminfo is readable");
  }
  const std::string detail = format_bytes(total) + " total RAM";
  if (total < kMinRamBytes) {
    return make("memory", CheckStatus::kWarn, detail + ", less than " + format_bytes(kMinRamBytes),
                "close other programs or use a machine with more memory; a smaller "
                "--batch-size needs less");
  }
  return make("memory", CheckStatus::kOk, detail);
}

DoctorCheck check_precision(const DeviceProbe& probe) {
  const CpuInfo& cpu = probe.cpu;
  const std::string model = cpu.model.empty() ? "this CPU" : cpu.model;
  std::string detail;
  if (cpu.has_bf16) {
    detail = model + ": native bf16" +
             (cpu.has_fp16 ? std::string(" and fp16 (avx512_bf16/amx, avx512_fp16)")
                           : std::string(" (avx512_bf16/amx), no native fp16")) +
             ", so --precision bf16 runs natively; whether it beats fp32 depends on the model "
             "(saturate tune measures it)";
  } else {
    detail = model + ": no native bf16" + (cpu.has_fp16 ? ", native fp16" : " or fp16") +
             ", so bf16 autocast is emulated and much slower than fp32 (6x at batch 64 on an "
             "AMD EPYC without AVX-512): train in fp32 on this CPU";
  }
  std::vector<std::string> gpus;
  for (const auto& g : probe.gpus) {
    gpus.push_back("cuda:" + std::to_string(g.index) +
                   (g.has_bf16 ? " bf16 and fp16" : g.cc_major >= 7 ? " fp16" : " no fast fp16"));
  }
  if (!gpus.empty()) detail += "; " + join(gpus, ", ");
  return make("precision", CheckStatus::kOk, detail);
}

// A malloc that keeps freed memory, where the system has one installed.
std::string installed_caching_malloc() {
  for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                          "/usr/lib", "/usr/local/lib"}) {
    for (const char* lib : {"libjemalloc.so.2", "libtcmalloc_minimal.so.4", "libtcmalloc.so.4"}) {
      const std::string path = std::string(dir) + "/" + lib;
      if (path_exists(path)) return path;
    }
  }
  return "";
}

DoctorCheck check_allocator(const DoctorOptions& options) {
  std::string cost;
  if (options.measure_page_faults) {
    const PageFaultCost c = measure_page_fault_cost();
    if (c.faults > 0) {
      cost = "fresh memory costs " + format_fixed(c.ms_per_gib, 0) + " ms per GiB to fault in (" +
             format_fixed(c.us_per_fault, 2) + " us per fault)";
    }
  }
  if (!cpu_cache_enabled()) {
    return make("allocator", CheckStatus::kWarn,
                "SATURATE_CPU_CACHE turns saturate's caching CPU allocator off: every step "
                "maps its large tensors afresh" + (cost.empty() ? "" : "; " + cost),
                "unset SATURATE_CPU_CACHE");
  }
  const std::string malloc_lib = installed_caching_malloc();
  const std::string python_fix =
      malloc_lib.empty() ? "apt-get install libjemalloc2 and start it with "
                           "LD_PRELOAD=libjemalloc.so.2, or with MALLOC_MMAP_THRESHOLD_=4294967296 "
                           "MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=536870912"
                         : "start it with LD_PRELOAD=" + malloc_lib +
                               " (or MALLOC_MMAP_THRESHOLD_=4294967296 "
                               "MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=536870912)";
  return make("allocator", CheckStatus::kOk,
              "saturate caches freed CPU tensor memory, so its steps reuse blocks" +
                  (cost.empty() ? std::string() : "; " + cost) +
                  "; a Python PyTorch job pays that each step for tensors glibc maps afresh: " +
                  python_fix);
}

DoctorCheck check_dataset(const DoctorOptions& options) {
  const std::string& spec = options.data_spec;
  if (!spec.empty() && spec != "fashion-mnist" && options.check_data) return options.check_data(spec);
  if (spec.empty() || spec.rfind("synthetic", 0) == 0) {
    return make("dataset", CheckStatus::kOk,
                (spec.empty() ? std::string("no dataset") : spec) + ": needs no files");
  }
  if (spec != "fashion-mnist") {
    if (path_exists(spec)) return make("dataset", CheckStatus::kOk, spec + " exists");
    return make("dataset", CheckStatus::kFail, spec + " does not exist",
                "pass an existing file or folder, or --data fashion-mnist");
  }
  const char* env_dir = std::getenv("SATURATE_FASHION_MNIST_DIR");
  const bool from_env = env_dir != nullptr && *env_dir != '\0';
  const std::string dir = from_env ? env_dir : kFashionMnistDefaultDir;
  const std::string where =
      "fashion-mnist at " + dir + (from_env ? " (from SATURATE_FASHION_MNIST_DIR)" : "");
  std::vector<std::string> missing;
  for (const char* name : kFashionMnistFiles) {
    // The Debian package ships the files gzipped; an unpacked copy is as good.
    const std::string file = dir + "/" + name;
    if (!path_exists(file) && !path_exists(file + ".gz")) {
      missing.push_back(name);
    }
  }
  if (missing.empty()) return make("dataset", CheckStatus::kOk, where);
  return make("dataset", CheckStatus::kFail, where + ": missing " + join(missing, ", "),
              "apt-get install dataset-fashion-mnist, or point SATURATE_FASHION_MNIST_DIR at a "
              "folder with the 4 files");
}

}  // namespace

std::vector<DoctorCheck> run_doctor(const DoctorOptions& options, const DeviceProbe& probe) {
  return {check_libtorch(probe),      check_cuda(probe),   check_blas(options, probe),
          check_threads(probe),       check_onednn(probe), check_precision(probe),
          check_allocator(options),   check_memory(probe), check_dataset(options)};
}

std::string to_string(CheckStatus s) {
  switch (s) {
    case CheckStatus::kOk:
      return "ok";
    case CheckStatus::kWarn:
      return "warn";
    case CheckStatus::kFail:
      return "fail";
  }
  return "fail";
}

}  // namespace saturate
