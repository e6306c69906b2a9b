// SPDX-License-Identifier: Apache-2.0
#pragma once
// A clock and a stop flag that every rank of a job reads alike, so decisions made on time or on
// Ctrl-C (a tune's budget, its stages) never part the ranks' ways.
//
//   std::atomic<bool> agreed_stop{false};
//   options.elapsed_s = agreed_elapsed_s(group, g_interrupted, agreed_stop);
//   options.stop = &agreed_stop;

#include <atomic>
#include <functional>

#include "saturate/distributed/process_group.h"

namespace saturate {

/// Each call all-gathers every rank's seconds since this call was made and its `local_stop`;
/// returns rank 0's seconds and sets `agreed_stop` once any rank's flag is set. A collective:
/// every rank must call it at the same points. `group`, `local_stop` and `agreed_stop` must
/// outlive the returned function.
std::function<double()> agreed_elapsed_s(DistGroup& group, const std::atomic<bool>& local_stop,
                                         std::atomic<bool>& agreed_stop);

}  // namespace saturate
