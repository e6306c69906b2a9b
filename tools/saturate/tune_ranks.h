// SPDX-License-Identifier: Apache-2.0
#pragma once
// The JobRunner of `saturate tune`'s ranks stage (tune/ranks_stage.h): each job is
// `saturate train --config PLAN` started as config.world_size ranks by launch(), exactly as
// the plan will be run.

#include <memory>
#include <string>

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

/// The ranks stage of `saturate tune` on this host: 1 process against 2, 4, ... (up to
/// `max_ranks`, 0: the usable cores) through LaunchJobRunner, inside the budget the tune left;
/// prints the stage when it ran and adds its time to the plan's.
void run_ranks_stage(Plan& plan, const Recipe& recipe, const TrainingInput& input,
                     const std::string& model, int max_ranks, double budget_s,
                     int64_t memory_limit_bytes);

}  // namespace saturate::cli
