// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private: copies of loader batches to a GPU on a side stream. The consumer's stream waits on an
// event recorded after the copy (it never blocks the host), and a buffer is refilled only once
// its copy has finished.

#include <memory>

#include "saturate/data/batch_source.h"

namespace saturate::detail {

class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;
  /// Queues the copy of `host` (pinned) to the device; returns the device batch, usable on the
  /// device's current stream. `slot` names the host buffer.
  virtual Batch copy(const Batch& host, int slot) = 0;
  /// Blocks until the last copy out of `slot` has finished (before the buffer is refilled).
  virtual void wait(int slot) = 0;
};

/// For CUDA device `index` with `slots` host buffers; throws saturate::Error without CUDA.
std::unique_ptr<DeviceCopier> make_device_copier(int index, int slots);

}  // namespace saturate::detail
