// SPDX-License-Identifier: Apache-2.0
// The CUDA DeviceMemory in a build whose LibTorch has no CUDA.
#include "device/device_memory_impl.h"
#include "saturate/core/error.h"

namespace saturate::detail {

std::unique_ptr<DeviceMemory> make_cuda_device_memory(c10::DeviceIndex index, int64_t) {
  SATURATE_CHECK(false, "memory: cuda:", static_cast<int>(index),
                 " requested but this saturate was built against a LibTorch without CUDA");
  return nullptr;
}

}  // namespace saturate::detail
