// SPDX-License-Identifier: Apache-2.0
#pragma once
// The command table and what every command file shares: exit codes, the interrupt flag, and
// flag parsing with "did you mean" for unknown options.

#include <atomic>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "saturate/device/probe.h"
#include "saturate/diagnose/diagnose.h"
#include "saturate/diagnose/run_facts.h"     // environment_facts
#include "saturate/report/findings_table.h"  // print_findings

namespace CLI {
class App;
}

namespace saturate {
class DistGroup;
struct DistEnv;
class JsonlSink;
class MultiSink;
class TensorBoardSink;
class TraceSink;
}  // namespace saturate

namespace saturate::cli {

enum class ExitCode : int {
  kOk = 0,
  kFailure = 1,
  kUsage = 2,
  kInterrupted = 130,  ///< SIGINT (128 + 2)
  kTerminated = 143,   ///< SIGTERM (128 + 15), once stop_on_sigterm() is in force
};

/// One `saturate <name>` command. `run` gets the arguments after the command name.
struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

const std::vector<Command>& commands();

/// Set by SIGINT; long-running commands stop after the current step and return kInterrupted.
extern std::atomic<bool> g_interrupted;
/// Set by SIGTERM once stop_on_sigterm() ran (g_interrupted is set too).
extern std::atomic<bool> g_terminated;
/// From now on SIGTERM (what SLURM and Kubernetes send before they kill) stops the run at the
/// next step boundary like SIGINT, instead of ending the process at once; a second one ends it.
void stop_on_sigterm();

/// Parses `args` into `app`. Unknown options and other usage mistakes throw saturate::Error
/// (with a suggestion); `--help` prints the usage and returns false (the command then exits 0).
bool parse_args(CLI::App& app, const std::vector<std::string>& args);

/// Throws saturate::Error naming `flag` when `path` cannot be created or written. Leaves an
/// existing file as it was and removes one it had to create.
void check_writable(const std::string& path, const std::string& flag);

/// Throws saturate::Error naming the flag when --logdir cannot be made or written, or --trace
/// cannot be written: for commands that open their sinks late but must fail before any work.
void check_sink_paths(const std::string& logdir, const std::string& trace_path);

/// The --logdir (TensorBoard scalars + DIR/steps.jsonl) and --trace sinks of a run. Opened by
/// the constructor, so a bad path fails before any work; each open sink is added to `sinks`.
/// Under data parallel each rank logs to DIR/rankN, and the trace gets one track per rank:
/// finish() (called by every rank after the run) gathers them and rank 0 writes the file.
struct FileSinks {
  /// `resume_step` >= 0: a run resumed at that step appends to the logs of the earlier part.
  FileSinks(const std::string& logdir, const std::string& trace_path, MultiSink& sinks,
            const DistEnv& dist, int64_t resume_step = -1);
  ~FileSinks();
  void finish(DistGroup* group);
  std::unique_ptr<TensorBoardSink> tensorboard;
  std::unique_ptr<JsonlSink> jsonl;
  std::unique_ptr<TraceSink> trace;

 private:
  std::string trace_path_;
  int rank_ = 0, world_ = 1;
};

/// Help text of the --data option of train, profile and tune.
inline constexpr const char* kDataSpecHelp =
    "fashion-mnist, mnist, idx:DIR, cifar10:DIR, cifar100:DIR, npy:DIR, records:DIR, "
    "folder:DIR[@HxWxC] or synthetic:C,H,W,CLASSES,COUNT[,DECODE_US]";

/// This saturate executable's path (/proc/self/exe).
std::string self_executable();
/// Runs `saturate <command> <args>` as `ranks` data-parallel processes on this node, as
/// `saturate launch --nproc-per-node ranks` would; returns the job's exit code.
int run_as_ranks(int ranks, const char* command, const std::vector<std::string>& args);

/// True when stderr is a terminal (progress bars redraw in place).
bool stderr_is_tty();

int run_compare(const std::vector<std::string>& args);
int run_doctor(const std::vector<std::string>& args);
int run_eval(const std::vector<std::string>& args);
int run_launch(const std::vector<std::string>& args);
int run_monitor(const std::vector<std::string>& args);
int run_pack(const std::vector<std::string>& args);
int run_profile(const std::vector<std::string>& args);
int run_report(const std::vector<std::string>& args);
int run_train(const std::vector<std::string>& args);
int run_tune(const std::vector<std::string>& args);

}  // namespace saturate::cli
