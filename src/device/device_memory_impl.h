// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private: the CUDA DeviceMemory, defined in cuda_device_memory.cpp (CUDA builds) or
// cuda_device_memory_none.cpp.

#include <memory>

#include "saturate/device/device_memory.h"

namespace saturate::detail {

std::unique_ptr<DeviceMemory> make_cuda_device_memory(c10::DeviceIndex index, int64_t limit_bytes);

}  // namespace saturate::detail
