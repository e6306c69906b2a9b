// SPDX-License-Identifier: Apache-2.0
#pragma once
// The CPU budget allocator: installed as LibTorch's CPU allocator, it counts live and peak bytes
// of CPU tensors and throws c10::OutOfMemoryError past a budget — the same exception a GPU
// raises — so memory-bound behaviour can be tested and capped on any machine. It caches freed
// blocks by size class and hands them to the next request of that class, as the CUDA caching
// allocator does, so a training step stops paying malloc, mmap and page faults for the same
// activations every step. The budget counts cached blocks: they are returned to the system
// before the cache would take the process past it.
//
//   saturate::install_cpu_budget();                  // once, at start-up
//   saturate::set_cpu_budget(2LL << 30);             // 2 GiB; 0 = unlimited
//   saturate::CpuBudgetStats s = saturate::cpu_budget_stats();
//   saturate::release_cpu_cache();                   // cached blocks back to the system
//
// Not covered: pinned host memory, oneDNN/MKL/OpenMP scratch, anything allocated with malloc.

#include <cstddef>
#include <cstdint>

namespace saturate {

struct CpuBudgetStats {
  int64_t live_bytes = 0;      ///< what live tensors asked for
  int64_t peak_memory_bytes = 0;      ///< highest live_bytes since reset_cpu_budget_peak()
  int64_t cached_bytes = 0;    ///< freed blocks kept for reuse
  int64_t reserved_bytes = 0;  ///< held from the system: live blocks (size-class rounded) + cached
  int64_t limit_bytes = 0;     ///< 0 = unlimited
  int64_t num_allocations = 0;         ///< requests served
  int64_t num_system_allocations = 0;  ///< of them, the ones the cache could not serve
  int64_t num_ooms = 0;        ///< allocations refused for the budget
};

/// Makes the budget allocator LibTorch's CPU allocator. Idempotent and thread-safe; the
/// allocator lives until the process ends. Tensors allocated before keep their old deleter.
void install_cpu_budget();
/// True once install_cpu_budget() has run.
bool is_cpu_budget_installed();
/// Sets the budget in bytes (0 = unlimited). Allocations that would take live bytes past it
/// throw c10::OutOfMemoryError; existing ones are not touched. Throws saturate::Error when < 0.
void set_cpu_budget(int64_t limit_bytes);
CpuBudgetStats cpu_budget_stats();
/// Starts a new peak window at the current live bytes.
void reset_cpu_budget_peak();
/// Returns every cached block to the system; the bytes returned.
int64_t release_cpu_cache();
/// The block size a request of `n` bytes is served from: 64-byte steps up to 4 KiB (at most 63
/// bytes over), eight classes per power of two up to 1 MiB (at most 12.5% over), then 64 KiB
/// steps (at most 6.25% over).
size_t cpu_cache_size_class(size_t n);
/// False when SATURATE_CPU_CACHE is "off" or "0": every free then goes back to malloc (to
/// measure what the cache is worth, or to rule it out). Read once per process by the allocator.
bool cpu_cache_enabled();

/// Minor page faults of this process so far (all threads, getrusage); -1 when unknown. A step
/// that page-faults is touching memory the system just handed over: fresh zeroed pages.
int64_t minor_page_faults();

/// What faulting in fresh memory costs on this machine.
struct PageFaultCost {
  int64_t faults = 0;        ///< faults the measurement took; 0 when it could not run
  double us_per_fault = 0;   ///< microseconds per minor fault (a 4 KiB page, or a huge page)
  double ms_per_gib = 0;     ///< milliseconds to fault in 1 GiB
};
/// Maps `bytes` of fresh anonymous memory, touches each page once and times it; the fastest of
/// three rounds (64 MiB: ~30-100 ms in all). This is what a step pays for every tensor that malloc serves with a new mmap().
PageFaultCost measure_page_fault_cost(int64_t bytes = int64_t{64} << 20);

}  // namespace saturate
