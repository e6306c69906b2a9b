// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every difference between the LibTorch versions saturate supports (>= 2.4; built here against
// the pinned PyPI wheel, run on GPU machines against 2.11) lives in this one header. See
// ../shared/reference/libtorch-compat.md for where each fact comes from.
//
// Private: include it from src/ only, never from a public header.

#include <cstring>

#include <ATen/autocast_mode.h>
#include <c10/core/Allocator.h>
#include <torch/version.h>

#define SATURATE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if !SATURATE_TORCH_AT_LEAST(2, 4)
#error "saturate needs LibTorch >= 2.4 (generic autocast API, CPU kernels for the AMP ops)"
#endif

// c10::Allocator: allocate() lost its const in 2.3 (PR #120969) and copy_data() became pure
// virtual with the copy-on-write work (PR #113396). Both hold from 2.4 on, so there is one
// spelling; the macros name the two facts for the allocator that depends on them.
#define SATURATE_ALLOCATOR_ALLOCATE_CONST /* non-const since 2.3 */
#define SATURATE_ALLOCATOR_HAS_COPY_DATA 1

#if SATURATE_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace saturate::compat {

// Autocast: 2.4 introduced the generic per-device-type API; the per-device names
// (set_cpu_enabled, set_autocast_gpu_dtype, ...) are deprecated wrappers that warn.
inline bool is_autocast_enabled(c10::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
inline void set_autocast_enabled(c10::DeviceType t, bool on) {
  at::autocast::set_autocast_enabled(t, on);
}
inline c10::ScalarType get_autocast_dtype(c10::DeviceType t) {
  return at::autocast::get_autocast_dtype(t);
}
inline void set_autocast_dtype(c10::DeviceType t, c10::ScalarType dtype) {
  at::autocast::set_autocast_dtype(t, dtype);
}

#if SATURATE_HAS_CUDA
// CUDA caching allocator statistics. In 2.x DeviceStats is c10::CachingDeviceAllocator's and
// StatType is no longer re-exported: index the StatArray with 0 (AGGREGATE).
constexpr size_t kAggregateStat = 0;
struct CudaAllocatorStats {
  int64_t allocated_current_bytes = 0;
  int64_t allocated_peak_bytes = 0;
  int64_t reserved_current_bytes = 0;
  int64_t reserved_peak_bytes = 0;
  int64_t num_ooms = 0;
};
inline CudaAllocatorStats cuda_allocator_stats(c10::DeviceIndex device) {
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  CudaAllocatorStats out;
  out.allocated_current_bytes = s.allocated_bytes[kAggregateStat].current;
  out.allocated_peak_bytes = s.allocated_bytes[kAggregateStat].peak;
  out.reserved_current_bytes = s.reserved_bytes[kAggregateStat].current;
  out.reserved_peak_bytes = s.reserved_bytes[kAggregateStat].peak;
  out.num_ooms = s.num_ooms;
  return out;
}
inline void cuda_reset_peak_stats(c10::DeviceIndex device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(device);
}
inline void cuda_empty_cache() { c10::cuda::CUDACachingAllocator::emptyCache(); }
inline void cuda_set_memory_fraction(double fraction, c10::DeviceIndex device) {
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device);
}
#endif

}  // namespace saturate::compat
