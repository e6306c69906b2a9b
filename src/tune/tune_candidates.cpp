// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/tune_candidates.h"

#include <algorithm>

#include "saturate/core/error.h"
#include "saturate/train/precision.h"

namespace saturate {

void add_device_candidates(TuneOptions& o, const RunConfig& base, const c10::Device& device,
                           const DeviceProbe& probe) {
  o.precisions.clear();
  for (Precision p : {Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    if (p == base.train.precision) continue;
    try {
      o.precisions.push_back(resolve_precision(p, device, probe).precision);
    } catch (const Error&) {
      // not supported here; resolve_precision says why when asked directly
    }
  }
  // Image models may run faster in the other layout; which one depends on model and hardware.
  o.memory_formats = {base.train.memory_format == MemoryFormat::kContiguous
                          ? MemoryFormat::kChannelsLast
                          : MemoryFormat::kContiguous};
  o.threads.clear();
  if (device.is_cpu() && base.threads > 1) o.threads = {base.threads, base.threads / 2};
  o.max_workers = std::max(1, probe.cpu.cores_usable);
}

}  // namespace saturate
