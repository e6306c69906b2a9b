// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private seam between probe.cpp and the CUDA half of the probe: cuda_probe.cpp in builds with
// CUDA (SATURATE_HAS_CUDA=1), cuda_probe_none.cpp otherwise. Only these files include CUDA
// headers.

#include "saturate/device/probe.h"

namespace saturate::detail {

/// Fills the CUDA fields of `probe`: torch_has_cuda, cuda_available, cuda_unavailable_reason,
/// cuda_runtime_version, cudnn_version and gpus. Never throws for a missing driver or device.
void probe_cuda(DeviceProbe& probe);

}  // namespace saturate::detail
