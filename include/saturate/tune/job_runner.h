// SPDX-License-Identifier: Apache-2.0
#pragma once
// JobRunner: runs a whole job of a configuration the way `saturate train --config` runs a plan
// (possibly several processes), for stages that cannot measure it as a trial in this process.
// The CLI's runner launches ranks; tests use a fake. Failure and Ctrl-C are outcomes, not
// exceptions, so a stage can record them and go on (or stop with a partial plan).
//
//   JobOutcome out = runner.run({config, /*steps=*/100});
//   if (out.status == JobStatus::kOk) use(out.job_samples_per_s);

#include <cstdint>
#include <limits>
#include <string>

#include "saturate/tune/trial.h"

namespace saturate {

struct JobRequest {
  RunConfig config;  ///< config.world_size processes, each config.train.batch_size samples
  int64_t steps = 0;
  /// A quality run: the job evaluates on the validation split at its end (a throughput run
  /// does not evaluate).
  bool validate = false;
};

enum class JobStatus {
  kOk,
  kFailed,       ///< a process failed (out of memory, a crash): `reason` says which and why
  kInterrupted,  ///< Ctrl-C (or another stop) reached the job
};

struct JobOutcome {
  JobStatus status = JobStatus::kOk;
  std::string reason;
  double job_samples_per_s = 0;   ///< steady state, all processes together
  int64_t peak_memory_bytes = 0;  ///< one process's training peak (each rank's is alike)
  double wall_s = 0;              ///< the whole run, start-up included
  /// Of a validating run: its validation accuracy and mean loss (NaN when not measured).
  double val_accuracy = std::numeric_limits<double>::quiet_NaN();
  double val_loss = std::numeric_limits<double>::quiet_NaN();
  /// Of pipeline stages: each stage's layer count as the run cut them ("1,2,2"; RunConfig's
  /// pipeline_split), empty otherwise.
  std::string pipeline_split;
};

class JobRunner {
 public:
  virtual ~JobRunner() = default;
  virtual JobOutcome run(const JobRequest& request) = 0;
};

}  // namespace saturate
