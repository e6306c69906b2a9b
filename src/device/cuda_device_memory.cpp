// SPDX-License-Identifier: Apache-2.0
// DeviceMemory over the CUDA caching allocator. Built only when LibTorch has CUDA.
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <algorithm>

#include "compat/torch_compat.h"
#include "device/device_memory_impl.h"
#include "saturate/core/error.h"
#include "saturate/core/units.h"

namespace saturate::detail {
namespace {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  CudaDeviceMemory(c10::DeviceIndex index, int64_t limit_bytes) : index_(index) {
    cudaDeviceProp props{};
    SATURATE_CHECK(cudaGetDeviceProperties(&props, index) == cudaSuccess,
                   "memory: cannot read the properties of cuda:", static_cast<int>(index));
    total_bytes_ = static_cast<int64_t>(props.totalGlobalMem);
    limit_bytes_ = total_bytes_;
    if (limit_bytes > 0) {
      SATURATE_CHECK(limit_bytes <= total_bytes_, "memory: --memory-limit ",
                     format_bytes(limit_bytes), " is more than cuda:", static_cast<int>(index),
                     " has (", format_bytes(total_bytes_), ")");
      // "Pretend this card has N bytes": the caching allocator raises OutOfMemoryError past it.
      compat::cuda_set_memory_fraction(
          static_cast<double>(limit_bytes) / static_cast<double>(total_bytes_), index);
      limit_bytes_ = limit_bytes;
    }
  }

  MemorySnapshot snapshot() const override {
    const auto s = compat::cuda_allocator_stats(index_);
    MemorySnapshot m;
    m.live_bytes = s.allocated_current_bytes;
    m.peak_memory_bytes = s.allocated_peak_bytes;
    m.reserved_bytes = s.reserved_current_bytes;
    m.cached_bytes = std::max<int64_t>(0, m.reserved_bytes - m.live_bytes);
    m.limit_bytes = limit_bytes_;
    return m;
  }
  void reset_peak() override { compat::cuda_reset_peak_stats(index_); }
  void release_cached() override { compat::cuda_empty_cache(); }
  int64_t limit_bytes() const override { return limit_bytes_; }
  std::string describe() const override {
    return "cuda:" + std::to_string(static_cast<int>(index_)) + " caching allocator, " +
           format_bytes(limit_bytes_) +
           (limit_bytes_ < total_bytes_ ? " of " + format_bytes(total_bytes_) : "");
  }

 private:
  c10::DeviceIndex index_;
  int64_t total_bytes_ = 0;
  int64_t limit_bytes_ = 0;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_cuda_device_memory(c10::DeviceIndex index, int64_t limit_bytes) {
  SATURATE_CHECK(index >= 0 && index < c10::cuda::device_count(), "memory: cuda:",
                 static_cast<int>(index), " is not a visible CUDA device (",
                 static_cast<int>(c10::cuda::device_count()), " visible)");
  return std::make_unique<CudaDeviceMemory>(index, limit_bytes);
}

}  // namespace saturate::detail
