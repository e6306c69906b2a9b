// SPDX-License-Identifier: Apache-2.0
#pragma once
// The CPU budget allocator: installed as LibTorch's CPU allocator, it counts live and peak bytes
// of CPU tensors and throws c10::OutOfMemoryError past a budget — the same exception a GPU
// raises — so memory-bound behaviour can be tested and capped on any machine.
//
//   saturate::install_cpu_budget();                  // once, at start-up
//   saturate::set_cpu_budget(2LL << 30);             // 2 GiB; 0 = unlimited
//   saturate::CpuBudgetStats s = saturate::cpu_budget_stats();
//
// Not covered: pinned host memory, oneDNN/MKL/OpenMP scratch, anything allocated with malloc.

#include <cstdint>

namespace saturate {

struct CpuBudgetStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t limit_bytes = 0;  ///< 0 = unlimited
  int64_t num_allocations = 0;
  int64_t num_ooms = 0;     ///< allocations refused for the budget
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

}  // namespace saturate
