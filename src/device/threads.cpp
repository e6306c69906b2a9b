// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/threads.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <sched.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "saturate/core/error.h"
#include "saturate/core/log.h"

namespace saturate {

int usable_cores() {
  // A dynamically sized set: the static cpu_set_t stops at 1024 CPUs, and sched_getaffinity
  // fails with EINVAL when the kernel's mask is larger than the buffer.
  long configured = sysconf(_SC_NPROCESSORS_CONF);
  int size = static_cast<int>(std::max(configured, 1L));
  for (int attempt = 0; attempt < 8; ++attempt, size *= 2) {
    cpu_set_t* set = CPU_ALLOC(size);
    if (set == nullptr) break;
    const size_t bytes = CPU_ALLOC_SIZE(size);
    CPU_ZERO_S(bytes, set);
    const int rc = sched_getaffinity(0, bytes, set);
    const int count = rc == 0 ? CPU_COUNT_S(bytes, set) : 0;
    const int err = errno;
    CPU_FREE(set);
    if (rc == 0) return std::max(count, 1);
    if (err != EINVAL) break;
  }
  return std::max(static_cast<int>(std::thread::hardware_concurrency()), 1);
}

int configure_threads(int requested) {
  SATURATE_CHECK(requested >= 0, "threads: --threads must be >= 0 (0 means one per usable core), ",
                 "got ", requested);
  const int usable = usable_cores();
  const int wanted = requested > 0 ? requested : usable;
  if (wanted > usable) {
    SATURATE_LOG_WARN("threads: ", wanted, " intra-op threads on ", usable,
                      " usable cores; the threads will time-share cores, which usually makes "
                      "training slower (use --threads ",
                      usable, " or --threads 0)");
  }
  at::set_num_threads(wanted);
  const int in_effect = at::get_num_threads();
  SATURATE_LOG_DEBUG("threads: LibTorch uses ", in_effect, " intra-op threads (", usable,
                     " usable cores)");
  return in_effect;
}

bool configure_denormals(bool flush) {
  const bool supported = at::globalContext().setFlushDenormal(flush);
  if (flush && !supported)
    SATURATE_LOG_DEBUG("threads: this CPU cannot flush denormals; computing them in full");
  return flush && supported;
}

bool configure_host_allocator() {
#if defined(__GLIBC__)
  // glibc accepts at most 32 MiB (half its 64 MiB heap size) through mallopt; larger blocks
  // are rare per step and cost one fault per page either way.
  constexpr int kMmapThreshold = 32 << 20;
  const bool ok = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
                  mallopt(M_TRIM_THRESHOLD, 2 * kMmapThreshold) == 1 &&
                  mallopt(M_TOP_PAD, 16 << 20) == 1;
  if (!ok) SATURATE_LOG_DEBUG("threads: malloc refused the heap settings; left as they were");
  return ok;
#else
  return false;
#endif
}

}  // namespace saturate
