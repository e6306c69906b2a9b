// SPDX-License-Identifier: Apache-2.0
#pragma once
// run_exec(): one run of a user's own training program under the exec protocol
// (docs/exec-protocol.md): started with execve in a new session and process group, its protocol
// lines read as they arrive (metrics file or prefixed stdout), its whole process group sampled
// (CPU per process, resident memory), held to a wall-clock limit, a no-progress limit and a
// memory limit, and stopped by signalling that group only (SIGTERM, then SIGKILL after a grace
// period). It returns when no process of the group is left.
//
//   ExecLaunch l;  l.argv = {"python3", "train.py"};  l.env = {{"SATURATE_BATCH_SIZE", "64"}};
//   l.run_dir = dir;  l.metrics_path = dir + "/metrics.jsonl";  l.stop_after_steps = 20;
//   const ExecRun r = run_exec(l);
//   if (r.outcome.status == ExecStatus::kOom) ...;  for (const ExecStep& s : r.steps) ...;

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "saturate/telemetry/exec_protocol.h"
#include "saturate/telemetry/nvml.h"

namespace saturate {

struct ExecLaunch {
  std::vector<std::string> argv;  ///< argv[0]: a path, or a name looked up in PATH
  /// Variables added to (or replacing those of) saturate's own environment.
  std::vector<std::pair<std::string, std::string>> env;
  /// An existing folder: stdout.log and stderr.log are written there (each up to 64 MiB).
  std::string run_dir;
  std::string metrics_path;  ///< where the program appends its lines; empty: prefixed stdout
  bool all_ranks = false;    ///< SATURATE_ALL_RANKS=1 was passed
  /// Bytes the process group may hold resident (0: no limit). Enforced by a cgroup v2
  /// memory.max where this process may create one, else by killing the group once the sampled
  /// resident memory is over it (the "RSS watchdog"); ExecRun::memory_limit_how says which.
  int64_t memory_limit_bytes = 0;
  double wall_limit_s = 0;   ///< the whole run (0: none)
  /// Seconds without a new step line before the group is stopped (0: none); the first step
  /// gets `startup_limit_s` instead (start-up, imports, data loading).
  double no_progress_s = 0;
  double startup_limit_s = 0;
  /// Stop the group once this many step lines arrived and the program did not end by itself
  /// within `grace_s` (0: wait for it to exit).
  int64_t stop_after_steps = 0;
  double grace_s = 5;
  double sample_interval_s = 0.2;  ///< process-group samples
  const std::atomic<bool>* stop = nullptr;  ///< set (Ctrl-C): stop the group now
  /// Where the group's GPU memory is read per PID (null or unloaded: not read).
  const Nvml* nvml = nullptr;
};

/// Why saturate stopped the group; kNone: the program ended by itself.
enum class ExecStopReason { kNone, kEnoughSteps, kWallLimit, kNoProgress, kMemoryLimit, kInterrupted };
std::string to_string(ExecStopReason r);  ///< "", "enough steps", "wall-clock limit", ...

/// One sample of the whole process group.
struct ExecGroupSample {
  double t = 0;           ///< seconds since the start
  int processes = 0;
  int64_t rss_bytes = 0;  ///< summed over the group's processes
  double cpu_cores = 0;   ///< CPU time per wall second since the previous sample, all processes
  int64_t gpu_memory_bytes = -1;  ///< GPU memory its processes hold (NVML); -1: not read
};

/// One process of the group over the run.
struct ExecProcessUse {
  int64_t pid = 0;
  std::string name;        ///< /proc comm ("python3", "pt_data_worker", ...)
  double cpu_s = 0;        ///< CPU time it used while sampled
  double seen_s = 0;       ///< how long it was seen
  int64_t peak_rss_bytes = 0;
  int64_t peak_gpu_memory_bytes = -1;  ///< NVML's; -1: not read
};

struct ExecRun {
  std::vector<ExecStart> starts;
  std::vector<ExecStep> steps;
  std::vector<ExecEval> evals;
  std::optional<ExecEnd> end;
  std::vector<std::string> warnings;  ///< the reader's, "metrics.jsonl:7: ..."
  ExecExit exit;
  ExecOutcome outcome;  ///< kOk also when saturate stopped it for having enough steps
  ExecStopReason stopped = ExecStopReason::kNone;
  double wall_s = 0;
  double started_unix_s = 0;      ///< when the program was started (Unix seconds)
  std::vector<ExecGroupSample> samples;
  std::vector<ExecProcessUse> processes;  ///< by pid, in order of first sight
  int64_t peak_rss_bytes = 0;     ///< the group's summed resident memory, highest sample
  int64_t peak_gpu_memory_bytes = -1;  ///< the group's GPU memory (NVML per PID); -1: not read
  std::string memory_limit_how;   ///< "cgroup v2 memory.max", "RSS watchdog (...)", "" (none)
  bool group_left_empty = true;   ///< no process of the group was left at the end
  std::string stdout_path, stderr_path;
};

/// Runs the program to its end or saturate's limits; returns when the group is gone. Throws
/// saturate::Error (exit 2) for what the program cannot be started with (no such program) and
/// for a fatal protocol line (after stopping the group); the program's own failures are in
/// `outcome`.
ExecRun run_exec(const ExecLaunch& launch);

}  // namespace saturate
