// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a tune tries on this device: the reduced precisions it runs besides the base's, the
// other memory layout, half the threads on a CPU, and input-pipeline workers up to its cores.
//
//   TuneOptions o;
//   add_device_candidates(o, base, device, probe);

#include <c10/core/Device.h>

#include "saturate/device/probe.h"
#include "saturate/tune/tuner.h"

namespace saturate {

void add_device_candidates(TuneOptions& options, const RunConfig& base, const c10::Device& device,
                           const DeviceProbe& probe);

}  // namespace saturate
