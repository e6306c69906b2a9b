// SPDX-License-Identifier: Apache-2.0
#pragma once
// The ranks stage of `saturate tune` on a CPU: processes × threads for the plan's global batch.

#include <atomic>
#include <string>

#include "saturate/tune/plan.h"

namespace saturate::cli {

struct RanksStageInput {
  bool on_cpu = true;
  int cores = 1;      ///< usable cores: candidates are 1 × cores, 2 × cores/2, ...
  int max_ranks = 1;  ///< the most processes to try
  bool model_has_buffers = false;  ///< BatchNorm statistics: per-rank batches change the model
  double budget_left_s = -1;       ///< -1: no budget
  const std::atomic<bool>* stop = nullptr;
};

/// Runs the plan's configuration as 1 process and as 2, 4, ... data-parallel processes
/// (up to max_ranks and the cores, the global batch split evenly), each the way
/// `saturate train --config` runs it, alternating them over two rounds; keeps W processes when
/// their median job samples/s beats one process's by more than 3%. Appends a "ranks" stage (and
/// its trials) to `plan`, with the reason when it did not run. Throws saturate::Error when a
/// candidate run fails.
void tune_ranks(Plan& plan, const RanksStageInput& in);

}  // namespace saturate::cli
