// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/device_memory.h"

#include <unistd.h>

#include <algorithm>

#include "device/device_memory_impl.h"
#include "saturate/core/error.h"
#include "saturate/core/units.h"
#include "saturate/device/cpu_budget.h"

namespace saturate {
namespace {

class CpuDeviceMemory final : public DeviceMemory {
 public:
  MemorySnapshot snapshot() const override {
    const CpuBudgetStats s = cpu_budget_stats();
    MemorySnapshot m;
    m.live_bytes = s.live_bytes;
    m.peak_memory_bytes = s.peak_memory_bytes;
    m.cached_bytes = s.cached_bytes;
    m.reserved_bytes = s.reserved_bytes;
    m.limit_bytes = s.limit_bytes;
    return m;
  }
  void reset_peak() override { reset_cpu_budget_peak(); }
  void release_cached() override { release_cpu_cache(); }
  int64_t limit_bytes() const override { return cpu_budget_stats().limit_bytes; }
  std::string describe() const override {
    const int64_t limit = limit_bytes();
    return limit > 0 ? "cpu caching allocator, budget " + format_bytes(limit)
                     : "cpu caching allocator (no budget)";
  }
};

}  // namespace

std::unique_ptr<DeviceMemory> make_device_memory(const c10::Device& device, int64_t limit_bytes) {
  SATURATE_CHECK(limit_bytes >= 0, "memory: --memory-limit must be positive, got ", limit_bytes);
  if (device.is_cpu()) {
    install_cpu_budget();
    set_cpu_budget(limit_bytes);
    return std::make_unique<CpuDeviceMemory>();
  }
  SATURATE_CHECK(device.is_cuda(), "memory: no memory accounting for device ", device.str());
  return detail::make_cuda_device_memory(device.has_index() ? device.index() : 0, limit_bytes);
}

int64_t host_memory_share(int local_ranks) {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<int64_t>(pages) * page / std::max(1, local_ranks);
}

}  // namespace saturate
