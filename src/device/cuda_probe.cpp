// SPDX-License-Identifier: Apache-2.0
// The CUDA probe (built only when SATURATE_HAS_CUDA): versions from LibTorch's CUDA hooks,
// devices from the CUDA runtime, and, when there are none, the reason from a dlopen of the
// driver library. saturate never links libcuda: a binary that did would not even start on a
// machine without the driver.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <string>

#include "device/cuda_probe_impl.h"

namespace saturate::detail {
namespace {

// CUDART_VERSION is major * 1000 + minor * 10 (13000 -> "13.0").
std::string format_cudart_version(long v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// CUDNN_VERSION is major * 10000 + minor * 100 + patch from cuDNN 9 on (91900 -> "9.19.0"),
// major * 1000 + minor * 100 + patch before.
std::string format_cudnn_version(long v) {
  const long major_unit = v >= 90000 ? 10000 : 1000;
  return std::to_string(v / major_unit) + "." + std::to_string((v % major_unit) / 100) + "." +
         std::to_string(v % 100);
}

// Collects the warnings LibTorch raises while initialising CUDA ("CUDA initialization: Found
// no NVIDIA driver on your system ...") so that they end up in the reason, not on stderr.
class CapturingWarningHandler : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    if (first_.empty()) first_ = warning.msg();
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

// Why torch::cuda::is_available() is false although LibTorch has CUDA: the driver library
// cannot be loaded, or it loads and reports no device.
std::string explain_no_devices(const std::string& init_warning) {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) {
    const char* err = dlerror();
    return std::string("no NVIDIA driver: libcuda.so.1 cannot be loaded (") +
           (err ? err : "unknown dlopen error") + ")";
  }
  dlclose(driver);
  std::string reason = "the driver reports no CUDA devices";
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    reason += std::string(" (CUDA_VISIBLE_DEVICES='") + visible + "')";
  }
  if (!init_warning.empty()) reason += ": " + init_warning;
  return reason;
}

}  // namespace

void probe_cuda(DeviceProbe& probe) {
  probe.gpus.clear();
  const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
  // The stub hooks of a CPU-only LibTorch throw from every version query; the real ones return
  // the versions LibTorch was built with, without touching the driver.
  try {
    probe.cuda_runtime_version = format_cudart_version(hooks.versionCUDART());
    probe.torch_has_cuda = true;
  } catch (const c10::Error&) {
    probe.torch_has_cuda = false;
  }
  if (!probe.torch_has_cuda) {
    probe.cuda_available = false;
    probe.cuda_unavailable_reason = "LibTorch was built without CUDA";
    return;
  }
  if (hooks.hasCuDNN()) {
    try {
      probe.cudnn_version = format_cudnn_version(hooks.versionRuntimeCuDNN());
    } catch (const c10::Error&) {
      probe.cudnn_version = format_cudnn_version(hooks.versionCuDNN());
    }
  }

  CapturingWarningHandler warnings;
  int count = 0;
  {
    c10::WarningUtils::WarningHandlerGuard guard(&warnings);
    probe.cuda_available = torch::cuda::is_available();
    count = probe.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  }
  if (!probe.cuda_available || count == 0) {
    probe.cuda_available = false;
    probe.cuda_unavailable_reason = explain_no_devices(warnings.first());
    return;
  }
  probe.cuda_unavailable_reason.clear();
  for (int i = 0; i < count; ++i) {
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(i));
    CudaDeviceInfo gpu;
    gpu.index = i;
    gpu.name = prop->name;
    gpu.mem_total_bytes = static_cast<int64_t>(prop->totalGlobalMem);
    gpu.cc_major = prop->major;
    gpu.cc_minor = prop->minor;
    gpu.multiprocessors = prop->multiProcessorCount;
    // Ampere (8.0) introduced both bf16 tensor-core math and TF32.
    gpu.has_bf16 = prop->major >= 8;
    gpu.has_tf32 = prop->major >= 8;
    probe.gpus.push_back(gpu);
  }
}

}  // namespace saturate::detail
