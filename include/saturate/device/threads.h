// SPDX-License-Identifier: Apache-2.0
#pragma once
// CPU threads for LibTorch's intra-op parallelism (matmul, convolutions, element-wise ops).
//
//   int n = saturate::configure_threads(/*requested=*/0);   // one thread per usable core

namespace saturate {

/// Logical CPUs this process may run on (sched_getaffinity, so taskset and container cpusets
/// count); at least 1.
int usable_cores();

/// Sets LibTorch's intra-op thread count, process-wide: `requested` > 0 sets that many, 0 sets
/// usable_cores(). Returns the count in effect (at::get_num_threads()). Logs a warning when the
/// count exceeds usable_cores() (threads then time-share cores). Throws saturate::Error when
/// `requested` < 0.
int configure_threads(int requested);

}  // namespace saturate
