// SPDX-License-Identifier: Apache-2.0
// CUDA side-stream copies for the Loader (built only when LibTorch has CUDA).
#include <optional>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "data/device_copy.h"
#include "saturate/core/error.h"

namespace saturate::detail {
namespace {

class CudaCopier final : public DeviceCopier {
 public:
  CudaCopier(int index, int slots)
      : device_(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)),
        side_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index())),
        done_(static_cast<size_t>(slots)) {}

  Batch copy(const Batch& host, int slot) override {
    const c10::cuda::CUDAGuard guard(device_);
    const c10::cuda::CUDAStream consumer = c10::cuda::getCurrentCUDAStream(device_.index());
    Batch out;
    out.size = host.size;
    {
      const c10::cuda::CUDAStreamGuard on_side(side_);
      out.inputs = host.inputs.to(device_, /*non_blocking=*/true);
      out.targets = host.targets.to(device_, /*non_blocking=*/true);
    }
    // The consumer's stream waits for the copy; the allocator learns the tensors are used there.
    auto& event = done_[static_cast<size_t>(slot)];
    event.emplace();
    event->record(side_);
    event->block(consumer);
    out.inputs.record_stream(consumer);
    out.targets.record_stream(consumer);
    return out;
  }

  void wait(int slot) override {
    auto& event = done_[static_cast<size_t>(slot)];
    if (event) event->synchronize();
  }

 private:
  c10::Device device_;
  c10::cuda::CUDAStream side_;
  std::vector<std::optional<at::cuda::CUDAEvent>> done_;
};

}  // namespace

std::unique_ptr<DeviceCopier> make_device_copier(int index, int slots) {
  return std::make_unique<CudaCopier>(index, slots);
}

}  // namespace saturate::detail
