// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training recipe's flags, declared once for train, profile and tune (one help text each),
// and what they resolve to: the device, the precision, the input pipeline and TrainOptions. A
// tune trial, a profile and a train run of the same flags build the same pipeline and step.

#include <cstdint>
#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "saturate/data/loader.h"
#include "saturate/data/training_input.h"
#include "saturate/device/probe.h"
#include "saturate/distributed/dist_env.h"
#include "saturate/distributed/process_group.h"
#include "saturate/train/gradient_sync.h"
#include "saturate/train/train_options.h"

namespace CLI {
class App;
}

namespace saturate {
class Loader;
class Model;
struct Plan;
struct TrainReport;
}

namespace saturate::cli {

struct RecipeFlags {
  std::string model = "fmnist-cnn";
  std::string data = "fashion-mnist";
  std::string device = "auto";
  std::string optimizer = "adamw";
  std::string schedule = "cosine";
  std::string precision = "fp32";
  std::string memory_format = "contiguous";
  std::string memory_limit;  ///< a size; empty: the device's
  std::string cache;         ///< a size; empty: no cache
  std::string config;        ///< plan.json from `saturate tune`
  std::string denormals = "flush";  ///< flush | keep
  std::string backend = "auto";     ///< data parallel: auto | gloo | nccl
  double dist_timeout_s = 300;      ///< data parallel: rendezvous and collectives
  int ranks = 1;  ///< data-parallel processes to start on this node (see ranks_to_launch)
  int threads = 0;
  int workers = 0;
  int prefetch = 2;
  int64_t crop = 0, pad = 0;
  bool flip = false;
  int64_t seq_len = 0;  ///< text data: tokens per window (0: 128)
  bool no_noise_scale = false;  ///< --no-noise-scale (TrainOptions::noise_scale)
  double val_fraction = 0;
  TrainOptions train;
};

/// Which command the flags are for: tune has no --config, and the defaults differ.
enum class RecipeUse { kTrain, kProfile, kTune };

/// Declares the recipe's flags on `app`, bound to `flags` (whose values are the defaults).
void add_recipe_flags(CLI::App& app, RecipeFlags& flags, RecipeUse use);

struct Recipe;

/// The recipe's pipeline flags in the plan, so `train --config` builds the pipeline the
/// trials measured.
void describe_recipe(Plan& plan, const RecipeFlags& rf, const Recipe& recipe,
                     int64_t val_samples);

/// Takes what `plan` decided for every recipe setting the command line did not give (flags
/// given explicitly override the plan, the plan overrides the defaults). A --batch-size that
/// differs from the plan's re-applies the plan's effective-batch rule (LR rescaled, or the
/// micro-batch kept through accumulation) and says so in the log.
/// The plan's batch is per rank of its config.world_size; run as `world` ranks, its rules apply
/// to the global batch (world × per-rank batch): "lr_rescaled" rescales the learning rate,
/// "kept" gives each rank its share of the plan's global batch, "unchanged" warns.
void apply_plan(const Plan& plan, const CLI::App& app, RecipeFlags& flags, int world);

/// How many ranks this command should start on this node before it does anything (0: none,
/// it runs here): --ranks, else the plan's world size, when no launcher has started this
/// process as a rank already. Under a launcher, a --ranks other than its world is an error.
int ranks_to_launch(const RecipeFlags& flags, const CLI::App& app, const Plan* plan,
                    const char* command);

/// The data-parallel side of a run: the launcher's environment and, when it says there are
/// several ranks, the joined group and the gradient sync the Trainer takes.
struct DataParallelRun {
  DistEnv env;
  c10::Device device{c10::kCPU};  ///< the recipe's, or cuda:LOCAL_RANK under a launcher
  std::unique_ptr<DistGroup> group;
  std::unique_ptr<GradientSync> sync;  ///< null for one process
  bool is_distributed() const { return env.is_distributed(); }
};

/// The recipe resolved on this machine.
struct Recipe {
  DeviceSpec device_spec;          ///< as given (--device)
  c10::Device device{c10::kCPU};   ///< one process's; a data-parallel rank's is DataParallelRun's
  std::string device_reason;
  DeviceProbe probe;
  int threads = 0;
  bool denormals_flushed = false;  ///< FTZ/DAZ in effect (see configure_denormals)
  int64_t memory_limit_bytes = 0;  ///< 0: the device's own
  TrainOptions train;              ///< precision resolved, validated
  InputOptions input;
};

/// Parses names and sizes (exit-2 errors naming the flag), sets the threads, picks the device
/// and resolves the precision. An impossible --memory-limit (below 1 MiB) is a usage error.
Recipe resolve_recipe(const RecipeFlags& flags, const char* command);

/// The input pipeline of the recipe on `device` (the run's: a data-parallel rank's own GPU;
/// pinned buffers and side-stream copies for CUDA): what train, profile and every tune trial
/// read through.
TrainingInput open_recipe_input(const Recipe& recipe, const c10::Device& device);

/// Joins the data-parallel job the environment describes (torchrun, srun), or returns a run of
/// one process. Bad variables, --backend or --dist-timeout are exit-2 errors.
/// `ranks_per_replica` > 1: that many ranks hold each replica of the model between them
/// (pipeline stages or tensor shares, train_pipeline.h), so the group is joined but no gradient
/// sync over the whole world is made.
DataParallelRun join_data_parallel(const RecipeFlags& flags, const Recipe& recipe,
                                   const char* command, int ranks_per_replica = 1);
/// For a collective that failed mid-run (almost always another rank that died or hung): throws
/// the one error line, naming the rank that exited when this host can tell.
[[noreturn]] void throw_collective_failure(const DataParallelRun& run, const char* command,
                                           const std::exception& e);
/// `loader` sharded for the run: this rank's part of each epoch. The ranks of one replica of a
/// split model all read their replica's part (rank / `ranks_per_replica` of world /
/// `ranks_per_replica`).
LoaderOptions shard_for(const DataParallelRun& run, LoaderOptions loader, int ranks_per_replica = 1);

/// What a train run ran with, into its report (the summary is already in `r`). A split model's
/// replica spans several ranks, so world_size counts the replicas: world / `ranks_per_replica`.
void describe_train_run(TrainReport& r, const RecipeFlags& flags, const Recipe& recipe,
                        const DataParallelRun& dp, const TrainingInput& input,
                        const Loader& loader, const Model& model, int ranks_per_replica);

}  // namespace saturate::cli
