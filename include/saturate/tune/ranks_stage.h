// SPDX-License-Identifier: Apache-2.0
#pragma once
// The ranks stage of a CPU tune: the plan's global batch as 1 process × all cores against 2, 4,
// ... data-parallel processes sharing them. Which is faster depends on the model and the
// machine (small GEMMs scale badly over threads; processes pay for the all-reduce), so each
// runs as a whole job through a JobRunner, the way `saturate train --config` runs the plan.
//
//   RanksStageOptions o;  o.cores = 8;  o.max_ranks = 8;  o.memory_limit_bytes = host_bytes;
//   tune_ranks(plan, o, launcher_runner);   // appends the "ranks" stage, maybe changes the plan

#include <atomic>
#include <cstdint>
#include <vector>

#include "saturate/tune/job_runner.h"
#include "saturate/tune/plan.h"

namespace saturate {

struct RanksStageOptions {
  bool on_cpu = true;  ///< on a GPU, one process per GPU is the launcher's choice: no stage
  int cores = 1;       ///< usable cores: candidates are 1 × cores, 2 × cores/2, ...
  /// The most processes to try: data-parallel ranks also stop at `cores`; a split model (stages,
  /// shares, when memory binds) may go past them, each process then on one thread.
  int max_ranks = 1;
  bool model_has_buffers = false;  ///< BatchNorm statistics: per-rank batches change the model
  double budget_left_s = -1;       ///< -1: no budget
  /// Memory every process of a candidate needs together (peak × ranks) must stay under
  /// this × (1 - reserve); 0: not checked.
  int64_t memory_limit_bytes = 0;
  double reserve = 0.10;
  double min_gain = 0.03;  ///< more processes must be this much faster, and beyond noise
  int rounds = 2;          ///< runs per candidate, alternating
  double startup_guess_s = 1.5;  ///< a run's start-up until the first run measures it
  double unknown_run_s = 5;      ///< a run's training time when no rate was measured
  /// Pipeline stages (issue 19): when the user's configuration did not fit one process's memory
  /// (`user_did_not_fit`: the plan fits by accumulation or recomputation) and the model's chain
  /// has this many layers (0: it cannot be split), the plan's global batch is also measured as
  /// 2, 4, ... pipeline stages over as many processes (one micro-batch count of min(4 × stages,
  /// batch), 1F1B, no accumulation or recomputation: the same optimisation). A stage's memory is
  /// its own process's, checked against `memory_limit_bytes` per process.
  int64_t pipeline_layers = 0;
  bool user_did_not_fit = false;
  /// Tensor parallel: the process counts the model's heads and columns split over (the GPT's;
  /// empty: none). When the user's configuration did not fit, the plan's global batch is also
  /// measured split so, every process taking the whole batch (no accumulation or recomputation;
  /// not with --adaptive-batch, which a split refuses), each
  /// process's memory checked on its own as a stage's is; and, where the chain splits too
  /// (`pipeline_layers`), as 2, 4, ... stages of each of these shares while stages × shares
  /// processes fit the cores.
  std::vector<int> tensor_parallel_sizes;
  /// The quality check of a layout kept in place of one process: both are trained on this many
  /// samples from the same seed and validated at the end, and the layout is kept only when its
  /// validation accuracy is at most `quality_tolerance` below one process's (absolute) and its
  /// validation loss at most that share above it; else one process is kept. 0: not checked.
  int64_t quality_samples = 0;
  double quality_tolerance = 0.01;
  const std::atomic<bool>* stop = nullptr;
};

/// Runs the plan's configuration as 1 process and as 2, 4, ... processes (up to max_ranks and
/// the cores, the global batch split evenly; and as pipeline stages, see above), alternating
/// over `rounds`; keeps W processes
/// when their median job samples/s beats one process's by the tuner's noise rule and they fit
/// in memory. Appends a "ranks" stage with the numbers and why (or why it did not run) and
/// each run as a trial. A candidate whose job fails is recorded as failed and left out; a
/// stop (Ctrl-C, or a job that reports one) ends the stage and marks the plan interrupted.
void tune_ranks(Plan& plan, const RanksStageOptions& options, JobRunner& runner);

}  // namespace saturate
