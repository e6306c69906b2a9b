// SPDX-License-Identifier: Apache-2.0
#include "command.h"

#include "saturate/core/temp_folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

#include <CLI/CLI.hpp>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/distributed/process_group.h"
#include "saturate/telemetry/file_sinks.h"
#include "saturate/telemetry/tensorboard_writer.h"

namespace saturate::cli {

std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_terminated{false};

namespace {
void on_sigterm(int) {
  if (g_terminated.exchange(true)) {
    // A second SIGTERM: stop now.
    std::signal(SIGTERM, SIG_DFL);
    std::raise(SIGTERM);
  }
  g_interrupted.store(true);
}
}  // namespace

void stop_on_sigterm() { std::signal(SIGTERM, on_sigterm); }

const std::vector<Command>& commands() {
  // The table is the registry: add a command here and in command.h.
  static const std::vector<Command> table = {
      {"compare", "compare two runs of a workload; exit 1 on a regression", run_compare},
      {"doctor", "check the environment: LibTorch, CUDA, BLAS, threads, data", run_doctor},
      {"eval", "evaluate a saved model (train --save-model) on a data set's test split", run_eval},
      {"launch", "start the ranks of a data-parallel job (torchrun's contract) and watch them",
       run_launch},
      {"monitor", "watch GPU and CPU utilisation, memory, power and clocks", run_monitor},
      {"pack", "convert a dataset to record files for fast, memory-mapped loading", run_pack},
      {"profile", "run training steps and show where each step's time goes", run_profile},
      {"report", "write a self-contained HTML report of a plan or a run", run_report},
      {"train", "train a model and report samples/s and accuracy", run_train},
      {"tune", "find the fastest configuration that fits and keeps quality; write a plan", run_tune},
  };
  return table;
}

void check_writable(const std::string& path, const std::string& flag) {
  make_parent_folders(path, flag);
  const bool existed = access(path.c_str(), F_OK) == 0;
  std::FILE* f = std::fopen(path.c_str(), "a");
  SATURATE_CHECK(f != nullptr, flag, ": cannot write '", path, "': ", std::strerror(errno));
  std::fclose(f);
  if (!existed) std::remove(path.c_str());
}

void check_sink_paths(const std::string& logdir, const std::string& trace_path) {
  if (!logdir.empty()) {
    make_folders(logdir, "telemetry: --logdir");
    SATURATE_CHECK(access(logdir.c_str(), W_OK) == 0, "telemetry: cannot write --logdir '", logdir,
                   "': ", std::strerror(errno));
  }
  if (!trace_path.empty()) check_writable(trace_path, "--trace");
}

FileSinks::FileSinks(const std::string& logdir, const std::string& trace_path, MultiSink& sinks,
                     const DistEnv& dist, int64_t resume_step)
    : trace_path_(trace_path), rank_(dist.rank), world_(dist.world_size) {
  if (!logdir.empty()) {
    // Data parallel: one stream per rank, DIR/rankN (TensorBoard shows each as a run).
    std::string dir = logdir;
    if (world_ > 1) {
      make_folders(logdir, "telemetry: --logdir");
      dir = logdir + "/rank" + std::to_string(rank_);
    }
    tensorboard = std::make_unique<TensorBoardSink>(dir, resume_step);
    jsonl = std::make_unique<JsonlSink>(dir + "/steps.jsonl", resume_step);
    sinks.add(tensorboard.get());
    sinks.add(jsonl.get());
  }
  if (!trace_path.empty()) {
    // Data parallel: each rank collects its own track, rank 0 writes them as one trace.
    if (world_ > 1) {
      if (rank_ == 0) check_writable(trace_path, "--trace");
      trace = std::make_unique<TraceSink>("", rank_, "rank " + std::to_string(rank_));
    } else {
      trace = std::make_unique<TraceSink>(trace_path, 0, "", resume_step);
    }
    sinks.add(trace.get());
  }
}

void FileSinks::finish(DistGroup* group) {
  if (!trace || world_ == 1 || group == nullptr) return;
  const std::vector<std::string> docs = group->allgather_bytes(trace->json());
  if (rank_ == 0) write_trace(trace_path_, merge_traces(docs));
}

FileSinks::~FileSinks() = default;

bool stderr_is_tty() { return isatty(STDERR_FILENO) == 1; }

namespace {
// "saturate train" → "train", the component prefix of error messages.
std::string component(const CLI::App& app) {
  const std::string name = app.get_name();
  const size_t space = name.rfind(' ');
  return space == std::string::npos ? name : name.substr(space + 1);
}
}  // namespace

bool parse_args(CLI::App& app, const std::vector<std::string>& args) {
  // CLI11 reports unknown options without a suggestion; check them first.
  std::vector<std::string> known;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& l : opt->get_lnames()) known.push_back("--" + l);
    for (const auto& s : opt->get_snames()) known.push_back("-" + s);
  }
  for (const auto& a : args) {
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-' || (a[1] != '-' && a.size() != 2)) continue;
    if (a[1] != '-' && std::isdigit(static_cast<unsigned char>(a[1]))) continue;  // "-1"
    const std::string flag = a.substr(0, a.find('='));
    bool found = false;
    for (const auto& k : known) found = found || k == flag;
    // Renamed flags say what they are called now (activation checkpointing became
    // "recompute" when checkpoints of training state arrived).
    SATURATE_CHECK(found || flag != "--checkpoint-segments", component(app),
                   ": --checkpoint-segments is now --recompute-segments (activation "
                   "recomputation; --checkpoint-* flags save training state)");
    SATURATE_CHECK(found, component(app), ": unknown option '", flag, "'",
                   did_you_mean(flag, known));
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    return false;
  } catch (const CLI::ParseError& e) {
    SATURATE_CHECK(false, component(app), ": ", e.what());
  }
  return true;
}

}  // namespace saturate::cli
