// SPDX-License-Identifier: Apache-2.0
#pragma once
// ExecTrialRunner: the TrialRunner of `saturate tune --exec` — every trial is a fresh run of the
// user's own program (run_exec) with the trial's settings passed by the exec protocol, measured
// from the step lines it writes. Out of memory (§7) is a value, as for the built-in runner; any
// other failure stops the tune with the program's own message. The quality guard's runs use the
// program's evaluation lines, or its training-loss curve when it writes none (and says so).
//
//   ExecRunnerOptions o;  o.command = command;  o.work_dir = runs.path();
//   ExecTrialRunner runner(o);
//   ExecRun first = runner.run_as_given(user_settings, 20);   // the program's own defaults
//   Plan plan = tune(runner, base, options);

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "saturate/telemetry/exec_process.h"
#include "saturate/telemetry/step_record.h"
#include "saturate/tune/exec_command.h"
#include "saturate/tune/trial.h"

namespace saturate {

/// Throughput of one run's step lines: the first `warmup_steps` (at least 1, whose end is the
/// first reference time) are not timed; samples/s = Σ samples × world over the timed steps / the
/// time they spanned. Phases: the mean step, the data wait the program reported, the rest as
/// compute (other_ms). Loss: the mean of the finite losses. Peak: the highest reported.
Measurement measure_exec_steps(const std::vector<ExecStep>& steps, int64_t warmup_steps,
                               int world_size);

/// The step lines as StepRecords for sinks and profiles: step time from consecutive `t` (the
/// first from `started_unix_s`), data wait as reported, the rest as other_ms.
std::vector<StepRecord> exec_step_records(const std::vector<ExecStep>& steps,
                                          double started_unix_s, int world_size);

/// What the guard compares: the last evaluation line (its name; a lower-is-better value is
/// negated so higher is better), else the negated mean training loss of the last steps (metric
/// "loss curve").
struct ExecQuality {
  std::string metric;      ///< "val_accuracy", "-val_loss", "-train_loss (no eval lines)"
  double value = 0;
  bool from_eval = false;
};
ExecQuality exec_quality(const ExecRun& run);

struct ExecRunnerOptions {
  ExecCommand command;
  std::string work_dir;            ///< each run gets work_dir/run-N as its SATURATE_RUN_DIR
  /// Keep each run's folder (logs, metrics) after it; false: removed once read, so a long
  /// tune's disk use stays bounded.
  bool keep_runs = false;
  /// Enforced on each run's process group (cgroup v2 or the RSS watchdog); 0: not enforced,
  /// and the tuner plans for this host's memory.
  int64_t memory_limit_bytes = 0;
  double startup_limit_s = 300;    ///< for the first step line of a run
  double no_progress_s = 120;      ///< between step lines
  double wall_limit_s = 0;         ///< per run (0: none)
  int64_t max_batch = int64_t{1} << 20;
  bool pin_memory = false;         ///< pass SATURATE_PIN_MEMORY=1 (a CUDA device is used)
  /// The program trains on a GPU: memory_limit_bytes caps its CUDA allocator through the
  /// protocol (SATURATE_DEVICE_MEMORY_LIMIT_BYTES) instead of its host memory.
  bool device_memory_limit = false;
  int world_size = 1;              ///< what the program's start line says; reads samples × world
  const std::atomic<bool>* stop = nullptr;
  /// Hears each run once it ended (for progress lines and the plan's log of runs).
  std::function<void(const std::string& purpose, const ExecSettings&, const ExecRun&)> on_run;
};

class ExecTrialRunner : public TrialRunner {
 public:
  explicit ExecTrialRunner(ExecRunnerOptions options);

  /// One run with exactly `settings` (the user's, plus max_steps), as the program would run
  /// without saturate choosing anything. Errors as for run(); out of memory throws too (the
  /// program's own configuration does not fit).
  ExecRun run_as_given(const ExecSettings& settings, const std::string& purpose);

  TrialOutcome run(const TrialRequest& request) override;
  QualityRun train_and_validate(const RunConfig& config, int64_t samples) override;
  /// The runs' mean time outside their step lines: start-up before the first step, evaluation
  /// and exit after the last.
  double run_overhead_s() const override {
    return overhead_runs_ > 0 ? overhead_s_ / overhead_runs_ : 0;
  }
  int64_t memory_limit_bytes() const override;
  int64_t max_batch_size() const override { return o_.max_batch; }

  int runs() const { return runs_; }
  /// The job's ranks, as the program's start line says (rank 0's samples × world).
  void set_world_size(int world) { o_.world_size = std::max(1, world); }
  const ExecRunnerOptions& options() const { return o_; }
  /// The settings a trial of `config` passes (max_steps aside).
  ExecSettings settings_for(const RunConfig& config, int64_t max_steps) const {
    return exec_settings(config, max_steps, o_.pin_memory);
  }

 private:
  ExecRun launch(const ExecSettings& settings, const std::string& purpose, int64_t stop_after);
  ExecRunnerOptions o_;
  std::shared_ptr<const Nvml> nvml_;  ///< the runs' GPU memory per PID (unloaded without NVML)
  int runs_ = 0;
  double overhead_s_ = 0;
  int overhead_runs_ = 0;
};

}  // namespace saturate
