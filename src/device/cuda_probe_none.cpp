// SPDX-License-Identifier: Apache-2.0
// The CUDA probe of a build without CUDA: nothing to find, and the reason says so.
#include "device/cuda_probe_impl.h"

namespace saturate::detail {

void probe_cuda(DeviceProbe& probe) {
  probe.torch_has_cuda = false;
  probe.cuda_available = false;
  probe.cuda_unavailable_reason = "LibTorch was built without CUDA";
  probe.cuda_runtime_version.clear();
  probe.cudnn_version.clear();
  probe.gpus.clear();
}

}  // namespace saturate::detail
