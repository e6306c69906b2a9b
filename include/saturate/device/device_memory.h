// SPDX-License-Identifier: Apache-2.0
#pragma once
// DeviceMemory: one seam for what a device's memory is doing — live, peak, reserved and limit
// bytes — so the tuner and the probes run the same on a GPU, on a CPU under a budget, and on a
// fake in tests.
//
//   auto mem = saturate::make_device_memory(c10::Device("cpu"), parse_bytes("2GiB", "--memory-limit"));
//   mem->reset_peak();  run_step();  int64_t peak = mem->snapshot().peak_memory_bytes;

#include <cstdint>
#include <memory>
#include <string>

#include <c10/core/Device.h>

namespace saturate {

struct MemorySnapshot {
  int64_t live_bytes = 0;      ///< held by tensors now
  int64_t peak_memory_bytes = 0;      ///< highest live_bytes since the last reset_peak()
  int64_t cached_bytes = 0;    ///< freed blocks the allocator keeps for reuse
  int64_t reserved_bytes = 0;  ///< held by the allocator: live blocks (rounded up) + cached
  int64_t limit_bytes = 0;     ///< what allocations may reach before OutOfMemory; 0 = no limit known
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual MemorySnapshot snapshot() const = 0;
  /// Starts a new peak window at the current live bytes.
  virtual void reset_peak() = 0;
  /// Returns cached, unused blocks to the system (CUDA: emptyCache; CPU: release_cpu_cache).
  virtual void release_cached() = 0;
  virtual int64_t limit_bytes() const = 0;
  /// One line for logs and reports: "cpu caching allocator, budget 2.00 GiB", "cuda:0 caching allocator, 140 GiB".
  virtual std::string describe() const = 0;
};

/// The memory of `device`. On CPU this installs saturate's counting allocator for the whole
/// process (once; see cpu_budget.h) and sets its budget to `limit_bytes` (0 = count only). On
/// CUDA, `limit_bytes` > 0 caps the caching allocator with setMemoryFraction, so a plan can be
/// made for a smaller card; more than the card has is an Error. Throws saturate::Error for a
/// CUDA device in a build without CUDA.
std::unique_ptr<DeviceMemory> make_device_memory(const c10::Device& device, int64_t limit_bytes);

/// The host memory free now (available physical pages), shared evenly by `local_ranks` processes
/// of one node; 0 when unknown.
int64_t host_memory_share(int local_ranks);

}  // namespace saturate
