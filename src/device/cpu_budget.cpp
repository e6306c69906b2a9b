// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/cpu_budget.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "compat/torch_compat.h"
#include "saturate/core/error.h"
#include "saturate/core/units.h"

namespace saturate {
namespace {

// LibTorch requires data == context for raw_allocate and copy-on-write, so the block size is
// kept in a header in front of the data instead of in a separate context object. 64 bytes keeps
// the data at c10's alignment.
constexpr size_t kHeaderBytes = 64;
static_assert(kHeaderBytes >= sizeof(size_t), "header must hold the size");

class CpuBudgetAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) SATURATE_ALLOCATOR_ALLOCATE_CONST override {
    if (n == 0) return {nullptr, nullptr, &free_block, c10::Device(c10::DeviceType::CPU)};
    const auto bytes = static_cast<int64_t>(n);
    const int64_t live = live_.fetch_add(bytes) + bytes;
    const int64_t limit = limit_.load();
    if (limit > 0 && live > limit) {
      live_.fetch_sub(bytes);
      num_ooms_.fetch_add(1);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: tried to allocate ",
                       format_bytes(bytes), " with ", format_bytes(live - bytes),
                       " in use and a budget of ", format_bytes(limit), " (--memory-limit)");
    }
    void* base = nullptr;
    if (posix_memalign(&base, kHeaderBytes, n + kHeaderBytes) != 0 || base == nullptr) {
      live_.fetch_sub(bytes);
      num_ooms_.fetch_add(1);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: the system refused ",
                       format_bytes(bytes));
    }
    *static_cast<size_t*>(base) = n;
    num_allocations_.fetch_add(1);
    int64_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
    }
    void* data = static_cast<char*>(base) + kHeaderBytes;
    return {data, data, &free_block, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }

#if SATURATE_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  static void free_block(void* data) {
    if (data == nullptr) return;
    void* base = static_cast<char*>(data) - kHeaderBytes;
    instance().live_.fetch_sub(static_cast<int64_t>(*static_cast<size_t*>(base)));
    std::free(base);
  }

  static CpuBudgetAllocator& instance() {
    // Never destroyed: tensors freed during static destruction still find it.
    static auto* allocator = new CpuBudgetAllocator();
    return *allocator;
  }

  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> limit_{0};
  std::atomic<int64_t> num_allocations_{0};
  std::atomic<int64_t> num_ooms_{0};
};

std::once_flag g_install_once;
std::atomic<bool> g_installed{false};

// Above the default allocator's registration (0), so ours stays in place.
constexpr uint8_t kAllocatorPriority = 1;

}  // namespace

void install_cpu_budget() {
  std::call_once(g_install_once, [] {
    c10::SetCPUAllocator(&CpuBudgetAllocator::instance(), kAllocatorPriority);
    g_installed.store(true);
  });
}

bool is_cpu_budget_installed() { return g_installed.load(); }

void set_cpu_budget(int64_t limit_bytes) {
  SATURATE_CHECK(limit_bytes >= 0, "memory: a CPU budget must not be negative, got ", limit_bytes);
  CpuBudgetAllocator::instance().limit_.store(limit_bytes);
}

CpuBudgetStats cpu_budget_stats() {
  auto& a = CpuBudgetAllocator::instance();
  CpuBudgetStats s;
  s.live_bytes = a.live_.load();
  s.peak_bytes = a.peak_.load();
  s.limit_bytes = a.limit_.load();
  s.num_allocations = a.num_allocations_.load();
  s.num_ooms = a.num_ooms_.load();
  return s;
}

void reset_cpu_budget_peak() {
  auto& a = CpuBudgetAllocator::instance();
  a.peak_.store(a.live_.load());
}

}  // namespace saturate
