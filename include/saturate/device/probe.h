// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the machine offers for training: LibTorch build, CPU and BLAS, CUDA devices; and the
// choice of training device from a DeviceSpec. Probing never prints and never throws for an
// absent GPU: the reason is recorded instead.
//
//   saturate::DeviceProbe probe = saturate::probe_devices();
//   auto choice = saturate::select_device(saturate::DeviceSpec::parse("auto"), probe);
//   model->to(choice.device);   // choice.reason: "cuda:0 (NVIDIA H200)" or why it is the CPU

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "saturate/device/device_spec.h"

namespace saturate {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int64_t mem_total_bytes = 0;
  int cc_major = 0, cc_minor = 0;  ///< compute capability
  int multiprocessors = 0;
  bool has_bf16 = false;  ///< native bf16 math (compute capability >= 8.0)
  bool has_tf32 = false;  ///< TF32 tensor cores (compute capability >= 8.0)
};

struct BlasInfo {
  std::string name;          ///< "MKL", "OpenBLAS", "BLIS", "reference BLAS" or "unknown"
  std::string library_path;  ///< mapped library it was identified from; "" when built in
  std::string build_config;  ///< the BLAS/LAPACK/oneDNN lines of at::show_config(), '\n'-joined
  bool has_onednn = false;
  /// Set for the reference BLAS. detect_blas() does not time anything; run_doctor() also
  /// reports a measured GEMM rate far below expectation.
  bool is_slow = false;
};

struct CpuInfo {
  std::string model;     ///< /proc/cpuinfo "model name"; "" when unknown
  int cores_online = 0;  ///< logical CPUs online
  int cores_usable = 0;  ///< logical CPUs this process may run on (sched_getaffinity)
  int64_t mem_total_bytes = 0;
  /// Native bf16 arithmetic (avx512_bf16 or amx_bf16 in /proc/cpuinfo flags); without it, CPU
  /// bf16 autocast is emulated and usually slower than fp32.
  bool has_bf16 = false;
  /// Native fp16 arithmetic (avx512_fp16 or amx_fp16). Reported by `doctor`; LibTorch's CPU
  /// autocast is bf16, so training does not use it.
  bool has_fp16 = false;
};

struct DeviceProbe {
  std::string torch_version;  ///< of the LibTorch loaded at run time, e.g. "2.11.0"
  CpuInfo cpu;
  BlasInfo blas;
  int intra_op_threads = 0, inter_op_threads = 0;
  bool torch_has_cuda = false;  ///< LibTorch was built with CUDA (its CUDA hooks are loaded)
  bool cuda_available = false;  ///< torch::cuda::is_available()
  /// Why cuda_available is false: "LibTorch was built without CUDA", "no NVIDIA driver:
  /// libcuda.so.1 cannot be loaded (...)", "the driver reports no CUDA devices". Empty otherwise.
  std::string cuda_unavailable_reason;
  std::string cuda_runtime_version, cudnn_version;  ///< "13.0", "9.19.0"; empty when unknown
  std::vector<CudaDeviceInfo> gpus;
};

/// Probes LibTorch, the CPU, the BLAS and the CUDA devices. Cheap (no timing, no allocation on
/// the GPU); may initialise the CUDA runtime. Warnings LibTorch raises while counting devices
/// are folded into cuda_unavailable_reason instead of being printed (a c10 warning handler is
/// swapped in for that moment, so call it at start-up, not concurrently with LibTorch work).
DeviceProbe probe_devices();

/// Identifies the BLAS LibTorch uses from at::show_config() and the libraries mapped into this
/// process (/proc/self/maps, symlinks resolved).
BlasInfo detect_blas();
/// The pure part of detect_blas(): `show_config` is at::show_config() text, `mapped_libraries`
/// the paths of mapped shared objects. A libblas.so.3 in a ".../blas/" folder is Debian's
/// reference BLAS; one in ".../openblas-*/" is OpenBLAS.
BlasInfo classify_blas(const std::string& show_config,
                       const std::vector<std::string>& mapped_libraries);
/// Times an n x n matmul of `dtype` (float32, bfloat16 or half) on `device` (the CPU by default)
/// `repeats` times (after one warm-up) and returns the median rate in GFLOP/s (2 n^3 flops per
/// matmul). On the CPU it uses the current intra-op thread count, and a bf16 run's peak is the
/// bf16 GEMM's: native (avx512_bf16, AMX) or emulated, whatever this CPU does; on a GPU each
/// timing waits for the device. Throws saturate::Error when n < 1 or repeats < 1.
double measure_gemm_gflops(int n = 512, int repeats = 5,
                           c10::ScalarType dtype = c10::ScalarType::Float,
                           const c10::Device& device = c10::Device(c10::kCPU));

struct DeviceChoice {
  c10::Device device;
  std::string reason;  ///< one line for logs and reports: what was chosen and why
};

/// Resolves a spec against what the probe found. kAuto: cuda:0 when CUDA is available, else the
/// CPU with the reason. kCuda when CUDA is unavailable throws saturate::Error "device: cuda
/// requested but <reason>; use --device cpu"; an index >= the device count throws naming the
/// count.
DeviceChoice select_device(const DeviceSpec& spec, const DeviceProbe& probe);

/// The device of data-parallel rank `local_rank` of the `local_world_size` ranks on its node.
/// With `--device auto` or `cuda` (no index) and CUDA available: one GPU per local rank,
/// cuda:LOCAL_RANK (torchrun's convention). An explicit cuda:N, or the CPU, is what every rank
/// uses. Throws saturate::Error when a node has more ranks than visible GPUs (NCCL cannot put
/// two ranks on one GPU), naming both counts. The GPU count comes from `probe.gpus`.
DeviceChoice select_rank_device(const DeviceSpec& spec, const DeviceProbe& probe, int local_rank,
                                int local_world_size);

}  // namespace saturate
