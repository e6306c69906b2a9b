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

/// Flushes denormal floats to zero (x86 FTZ/DAZ) when `flush`, or keeps IEEE gradual
/// underflow. Weights and gradients that decay towards zero (a loss near 0, weight decay)
/// become denormals, which x86 cores compute 10-100x slower: a training run slows down as it
/// converges, long after a short tuning trial measured it. The mode is per thread and new
/// threads inherit it, so this runs before any worker or intra-op thread starts. Returns
/// whether denormals are flushed (false also when the CPU cannot).
bool configure_denormals(bool flush);

/// Keeps freed heap memory in the process (glibc malloc): blocks of any size come from the
/// heap instead of fresh mmap()s, and a free does not hand the top of the heap back. Without
/// it each step's large activation tensors are mapped and unmapped, so every step page-faults
/// fresh zeroed memory, and how often depends on what the process allocated before (glibc
/// raises its threshold after the first large free): a long `tune` and a fresh `train` of the
/// same configuration would run at different speeds. Returns false where this is not glibc or
/// the settings were refused.
bool configure_host_allocator();

}  // namespace saturate
