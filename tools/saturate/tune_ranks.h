// SPDX-License-Identifier: Apache-2.0
#pragma once
// The JobRunner of `saturate tune`'s ranks stage (tune/ranks_stage.h): each job is
// `saturate train --config PLAN` started as config.world_size ranks by launch(), exactly as
// the plan will be run.

#include <memory>
#include <string>
#include <vector>

#include "saturate/core/temp_folder.h"
#include "saturate/data/training_input.h"
#include "saturate/tune/job_runner.h"
#include "saturate/tune/plan.h"
#include "recipe.h"

namespace saturate::cli {

class LaunchJobRunner : public JobRunner {
 public:
  /// Writes `plan` into a scratch folder of its own; every job runs it, with the candidate's
  /// batch, accumulation and threads on the command line.
  explicit LaunchJobRunner(const Plan& plan);
  /// Exit 0: the job's summary. 130 (Ctrl-C, which the launcher passes to the ranks):
  /// interrupted. Anything else: failed, with the failed rank's reason.
  JobOutcome run(const JobRequest& request) override;

 private:
  TempFolder scratch_;
  std::string plan_path_, summary_path_;
};

/// What the ranks stage needs to know of the model, read once before any memory limit is in
/// force: whether it keeps BatchNorm statistics, and how it splits over processes.
struct ModelLayoutFacts {
  bool has_buffers = false;
  int64_t param_bytes = 0;  ///< the whole model's parameters
  int64_t pipeline_layers = 0;
  std::vector<int> tensor_parallel_sizes;  ///< process counts up to the usable cores or --max-ranks
  /// The ranks stage could split it over this host's processes (at least 2 usable cores and
  /// --max-ranks): TuneOptions::model_splits.
  bool splits(int max_ranks) const;
};
ModelLayoutFacts model_layout_facts(const std::string& model, const TrainingInput& input,
                                    int max_ranks);

/// The memory limit a tune's trials run under: --memory-limit, or under a launcher on a CPU
/// node without one, this rank's share of the host.
int64_t tune_memory_limit(const Recipe& recipe, const DataParallelRun& dp);
/// TuneOptions::model_splits for this tune: on a CPU, not as one rank of a launched job, a
/// model that splits over this host's processes and whose weights fit the limit.
bool may_split(const Recipe& recipe, const DataParallelRun& dp, const ModelLayoutFacts& layout,
               int max_ranks, int64_t memory_limit);
/// After the ranks stage: exit 2 when one process could not hold the model and no split ran.
void check_some_layout_runs(const Plan& plan, int64_t memory_limit);

/// The ranks stage of `saturate tune` on this host: 1 process against 2, 4, ... (up to
/// `max_ranks`, 0: the usable cores) through LaunchJobRunner, inside the budget the tune left;
/// prints the stage when it ran and adds its time to the plan's. A layout it keeps in place of
/// one process is checked by quality runs of `quality_samples` (the guard's when it sized its
/// runs; 0: not checked) against `quality_tolerance`.
void run_ranks_stage(Plan& plan, const Recipe& recipe, const ModelLayoutFacts& model,
                     int max_ranks, double budget_s, int64_t memory_limit_bytes,
                     int64_t quality_samples, double quality_tolerance);

}  // namespace saturate::cli
