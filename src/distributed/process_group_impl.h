// SPDX-License-Identifier: Apache-2.0
#pragma once
// DistGroup's c10d state, for the dist module's own files (the reducer).

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "saturate/distributed/process_group.h"

namespace saturate {

struct DistGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  DistEnv env;
  DistBackend backend = DistBackend::kGloo;
  c10::Device device{c10::kCPU};
  std::chrono::milliseconds timeout{0};
  /// Per rank: "<machine> <pid>", where machine names the boot and PID namespace.
  std::vector<std::string> processes;
  /// send()s not yet waited for, with their tensors.
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, at::Tensor>> sends;
};

/// Waits for `work` up to the group's timeout; a timeout or a peer's failure becomes a
/// saturate::Error naming `what` and this rank.
void wait_for(DistGroup::Impl& g, const c10::intrusive_ptr<c10d::Work>& work, const char* what);

}  // namespace saturate
