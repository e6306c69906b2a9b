// SPDX-License-Identifier: Apache-2.0
#pragma once
// RunFacts from what a run knows: the environment (a DeviceProbe) and a Profile, so that
// diagnose() reads the findings off a profile the same way for every caller.
//
//   const Profile p = run_profile_job(options, job);
//   const std::vector<Finding> findings = diagnose(profile_facts(p));

#include <c10/core/Device.h>

#include "saturate/device/probe.h"
#include "saturate/diagnose/diagnose.h"
#include "saturate/tune/profile.h"

namespace saturate {

/// What diagnose() needs to know of the environment: the device that runs and whether a GPU
/// is there, its fast precisions, usable cores, intra-op threads, the BLAS and its measured
/// GEMM rate (`gemm_gflops`, -1 when not measured).
RunFacts environment_facts(const DeviceProbe& probe, const c10::Device& device, int threads,
                           double gemm_gflops);

/// The profile's environment, configuration and measurements as facts. The node's ranks share
/// its cores: the threads at work are every local rank's.
RunFacts profile_facts(const Profile& profile);

}  // namespace saturate
