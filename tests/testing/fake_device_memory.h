// SPDX-License-Identifier: Apache-2.0
#pragma once
// FakeDeviceMemory: a DeviceMemory whose numbers the test sets, with an allocate() that throws
// c10::OutOfMemoryError past the limit the way a real allocator does.

#include <algorithm>

#include <c10/util/Exception.h>

#include "saturate/device/device_memory.h"

namespace saturate::testing {

class FakeDeviceMemory : public DeviceMemory {
 public:
  explicit FakeDeviceMemory(int64_t limit_bytes = 0) : limit_(limit_bytes) {}
  MemorySnapshot snapshot() const override {
    MemorySnapshot m;
    m.live_bytes = live_;
    m.peak_memory_bytes = peak_;
    m.cached_bytes = cached_;
    m.reserved_bytes = live_ + cached_;
    m.limit_bytes = limit_;
    return m;
  }
  void reset_peak() override { peak_ = live_; }
  void release_cached() override {
    cached_ = 0;
    ++release_calls_;
  }
  int64_t limit_bytes() const override { return limit_; }
  std::string describe() const override { return "fake"; }

  /// Takes `bytes` or throws c10::OutOfMemoryError when live would pass the limit.
  void allocate(int64_t bytes) {
    if (limit_ > 0 && live_ + bytes > limit_) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "fake out of memory: tried to allocate ", bytes);
    }
    live_ += bytes;
    peak_ = std::max(peak_, live_);
  }
  void free(int64_t bytes) {
    live_ -= bytes;
    cached_ += bytes;
  }
  int release_calls() const { return release_calls_; }

 private:
  int64_t live_ = 0, peak_ = 0, cached_ = 0, limit_ = 0;
  int release_calls_ = 0;
};

}  // namespace saturate::testing
