// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/cpu_budget.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "compat/torch_compat.h"
#include "saturate/core/error.h"
#include "saturate/core/units.h"

namespace saturate {

bool cpu_cache_enabled() {
  const char* v = std::getenv("SATURATE_CPU_CACHE");
  return v == nullptr || (std::string(v) != "off" && std::string(v) != "0");
}

namespace {

// LibTorch requires data == context for raw_allocate and copy-on-write, so what a block is (its
// size class and the bytes asked for) is kept in a header in front of the data instead of in a
// separate context object. 64 bytes keeps the data 64-byte aligned (AVX-512 loads, c10's own
// alignment).
constexpr size_t kHeaderBytes = 64;
constexpr int64_t kCacheCapFactor = 2;
struct BlockHeader {
  size_t class_bytes;      // data bytes the block can hold; its free list
  size_t requested_bytes;  // what the tensor asked for; counted as live
};
static_assert(sizeof(BlockHeader) <= kHeaderBytes, "header must fit in front of the data");

BlockHeader* header_of(void* data) {
  return reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - kHeaderBytes);
}

}  // namespace

size_t cpu_cache_size_class(size_t n) {
  // Small blocks in 64-byte steps; up to 1 MiB, eight classes per power of two (at most 12.5%
  // over, and from 32 KiB up a whole number of pages); above, 64 KiB steps (at most 6.25%, and
  // 0.03% for a 200 MiB activation), so a large block wastes little of a budget.
  constexpr size_t kSmall = 4096;
  constexpr size_t kLarge = size_t{1} << 20;
  constexpr size_t kLargeStep = size_t{64} << 10;
  if (n <= kSmall) return (n + 63) / 64 * 64;
  if (n > kLarge) return (n + kLargeStep - 1) / kLargeStep * kLargeStep;
  const int top_bit = 63 - __builtin_clzll(static_cast<unsigned long long>(n));
  const size_t step = (size_t{1} << top_bit) / 8;
  return (n + step - 1) / step * step;
}

namespace {

// Freed blocks wait in per-size-class lists and serve the next request of the same class, the
// way the CUDA caching allocator works: a training step asks for the same sizes every step, so
// after the first step nearly nothing reaches malloc, and large activations no longer cost an
// mmap, a page fault per 4 KiB page (fresh zeroed memory) and an munmap every step.
//
// Budget: an allocation is refused exactly when live bytes (what tensors asked for) would pass
// the limit, as before the cache existed. The cache counts against the limit too: when the
// bytes held from the system (reserved = live blocks + cached blocks) would pass it, cached
// blocks are returned first, largest first, so a budgeted process never holds more than its
// budget because of the cache. Without a budget the cache holds at most twice the peak bytes of
// live blocks since it was last emptied; a free beyond that goes back to the system. Once is
// not enough: a block of one class is cached while another class is live, so reusing every
// block of a step takes more than its peak (fmnist-cnn at batch 2048: 1.04 GB held for a
// 673 MB peak; capped at the peak, six 196 MiB blocks went back to the system every step).
class CpuBudgetAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) SATURATE_ALLOCATOR_ALLOCATE_CONST override {
    if (n == 0) return {nullptr, nullptr, &free_block, c10::Device(c10::DeviceType::CPU)};
    void* data = take(n);
    return {data, data, &free_block, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }

#if SATURATE_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  static void free_block(void* data) {
    if (data != nullptr) instance().give_back(data);
  }

  static CpuBudgetAllocator& instance() {
    // Never destroyed: tensors freed during static destruction still find it.
    static auto* allocator = new CpuBudgetAllocator();
    return *allocator;
  }

  void set_limit(int64_t limit) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_.store(limit);
    if (limit > 0) trim_locked(limit - reserved_.load(), 0);
  }

  int64_t release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t before = cached_.load();
    trim_locked(0, before);
    return before;
  }

  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> cached_{0};
  std::atomic<int64_t> reserved_{0};
  std::atomic<int64_t> live_class_{0};  // live blocks in class bytes (reserved - cached)
  std::atomic<int64_t> cache_peak_{0};  // peak of live_class_ since the cache was last emptied
  std::atomic<int64_t> limit_{0};
  std::atomic<int64_t> num_allocations_{0};
  std::atomic<int64_t> num_system_allocations_{0};
  std::atomic<int64_t> num_ooms_{0};

 private:
  void* take(size_t n) {
    const auto bytes = static_cast<int64_t>(n);
    const size_t cls = cpu_cache_size_class(n);
    const auto cls_bytes = static_cast<int64_t>(cls);
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t limit = limit_.load();
    const int64_t live = live_.load() + bytes;
    if (limit > 0 && live > limit) {
      num_ooms_.fetch_add(1);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: tried to allocate ",
                       format_bytes(bytes), " with ", format_bytes(live - bytes),
                       " in use and a budget of ", format_bytes(limit), " (--memory-limit)");
    }
    void* base = nullptr;
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      base = it->second.back();
      it->second.pop_back();
      cached_.fetch_sub(cls_bytes);
    } else {
      if (limit > 0) trim_locked(cls_bytes - (limit - reserved_.load()), 0);
      base = system_allocate(cls);
      if (base == nullptr && cached_.load() > 0) {
        trim_locked(0, cached_.load());
        base = system_allocate(cls);
      }
      if (base == nullptr) {
        num_ooms_.fetch_add(1);
        TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: the system refused ",
                         format_bytes(bytes));
      }
      reserved_.fetch_add(cls_bytes);
      num_system_allocations_.fetch_add(1);
    }
    auto* header = static_cast<BlockHeader*>(base);
    header->class_bytes = cls;
    header->requested_bytes = n;
    live_.store(live);
    const int64_t live_class = live_class_.load() + cls_bytes;
    live_class_.store(live_class);
    num_allocations_.fetch_add(1);
    if (live > peak_.load()) peak_.store(live);
    if (live_class > cache_peak_.load()) cache_peak_.store(live_class);
    return static_cast<char*>(base) + kHeaderBytes;
  }

  void give_back(void* data) {
    BlockHeader* header = header_of(data);
    const auto cls_bytes = static_cast<int64_t>(header->class_bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    live_.fetch_sub(static_cast<int64_t>(header->requested_bytes));
    live_class_.fetch_sub(cls_bytes);
    static const bool caching = cpu_cache_enabled();
    if (!caching || cached_.load() + cls_bytes > kCacheCapFactor * cache_peak_.load()) {
      reserved_.fetch_sub(cls_bytes);
      std::free(header);
      return;
    }
    free_[header->class_bytes].push_back(header);
    cached_.fetch_add(cls_bytes);
  }

  // Transparent huge pages (posix_memalign to 2 MiB + madvise(MADV_HUGEPAGE) for blocks of
  // 4 MiB and more) were measured on top of the cache and left out: steady steps were no faster
  // (fmnist-cnn batch 2048: 2708 and 3278 samples/s vs 2760 and 3325 without) and the first step
  // took 3.3-3.7 s instead of 1.3-2.7 s (bench/RESULTS.md, issue 14).
  static void* system_allocate(size_t cls) {
    void* base = nullptr;
    if (posix_memalign(&base, kHeaderBytes, cls + kHeaderBytes) != 0) return nullptr;
    return base;
  }

  // Returns cached blocks to the system, largest classes first, until at least `at_least`
  // bytes are freed (nothing when <= 0), or `all` bytes when that is larger. Caller holds mutex_.
  void trim_locked(int64_t at_least, int64_t all) {
    const int64_t goal = std::max(at_least, all);
    int64_t freed = 0;
    for (auto it = free_.rbegin(); it != free_.rend() && freed < goal; ++it) {
      auto& blocks = it->second;
      while (!blocks.empty() && freed < goal) {
        std::free(blocks.back());
        blocks.pop_back();
        freed += static_cast<int64_t>(it->first);
      }
    }
    cached_.fetch_sub(freed);
    reserved_.fetch_sub(freed);
    if (cached_.load() == 0) cache_peak_.store(live_class_.load());
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached block bases
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
  CpuBudgetAllocator::instance().set_limit(limit_bytes);
}

CpuBudgetStats cpu_budget_stats() {
  auto& a = CpuBudgetAllocator::instance();
  CpuBudgetStats s;
  s.live_bytes = a.live_.load();
  s.peak_memory_bytes = a.peak_.load();
  s.cached_bytes = a.cached_.load();
  s.reserved_bytes = a.reserved_.load();
  s.limit_bytes = a.limit_.load();
  s.num_allocations = a.num_allocations_.load();
  s.num_system_allocations = a.num_system_allocations_.load();
  s.num_ooms = a.num_ooms_.load();
  return s;
}

void reset_cpu_budget_peak() {
  auto& a = CpuBudgetAllocator::instance();
  a.peak_.store(a.live_.load());
}

int64_t release_cpu_cache() { return CpuBudgetAllocator::instance().release_cached(); }

int64_t minor_page_faults() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return -1;
  return static_cast<int64_t>(usage.ru_minflt);
}

PageFaultCost measure_page_fault_cost(int64_t bytes) {
  PageFaultCost best;
  const long page = sysconf(_SC_PAGESIZE);
  if (bytes <= 0 || page <= 0) return best;
  const auto len = static_cast<size_t>(bytes);
  // The fastest of three: another thread (a sampler, a loader) running at the same moment
  // only ever makes a round slower.
  for (int round = 0; round < 3; ++round) {
    // Fresh anonymous memory, as glibc maps for a large malloc: every first touch is a fault
    // that the kernel serves with a zeroed page.
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) break;
    auto* data = static_cast<volatile char*>(p);
    const int64_t faults0 = minor_page_faults();
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t off = 0; off < len; off += static_cast<size_t>(page)) data[off] = 1;
    const auto t1 = std::chrono::steady_clock::now();
    const int64_t faults = minor_page_faults() - faults0;
    munmap(p, len);
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    if (faults <= 0) continue;
    const double ms_per_gib =
        us / 1000.0 * static_cast<double>(int64_t{1} << 30) / static_cast<double>(bytes);
    if (best.faults == 0 || ms_per_gib < best.ms_per_gib) {
      best.faults = faults;
      best.us_per_fault = us / static_cast<double>(faults);
      best.ms_per_gib = ms_per_gib;
    }
  }
  return best;
}

}  // namespace saturate
