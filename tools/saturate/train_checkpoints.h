// SPDX-License-Identifier: Apache-2.0
#pragma once
// saturate train's checkpoint flags (--checkpoint-dir, --checkpoint-every/-interval,
// --keep-checkpoints, --resume, --max-skipped-steps), finding the checkpoint to resume from,
// and the diagnosis of a diverged run. The library does the work (train/checkpoint.h,
// train/periodic_checkpoints.h); this file turns flags into its calls and its results into text.

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "saturate/data/training_input.h"
#include "saturate/models/model.h"
#include "saturate/train/periodic_checkpoints.h"
#include "saturate/train/trainer.h"

namespace CLI {
class App;
}

namespace saturate::cli {

struct CheckpointFlags {
  std::string dir;
  int64_t every_steps = 0;
  std::string interval;  ///< a duration; empty: 10min when --checkpoint-every is not given
  int keep = 3;
  std::string resume;    ///< a checkpoint folder, or "auto" (--checkpoint-dir's newest, if any)
  int64_t max_skipped_steps = 20;
  std::string save_model;  ///< --save-model: the trained weights as FILE.safetensors
};

void add_checkpoint_flags(CLI::App& app, CheckpointFlags& flags);

/// The checkpoint options the flags give (dir empty: no checkpoints). --resume DIR without
/// --checkpoint-dir checkpoints into DIR. Throws saturate::Error naming the flag.
CheckpointOptions checkpoint_options(const CheckpointFlags& flags);

/// The newest intact checkpoint --resume names, or nullopt ("auto" with none there yet: a
/// fresh start). Damaged newer ones are logged as passed over. Throws saturate::Error (exit 2)
/// when --resume names a folder with no usable checkpoint.
std::optional<LoadedCheckpoint> find_resume(const CheckpointFlags& flags);
/// A model split over `parts` processes (a pipeline's stages, a tensor split's shares) keeps one
/// checkpoint folder per part under the run's, DIR/part-K-of-N (written by replica 0's process
/// of part K, read by every replica's): the flags with --checkpoint-dir and --resume pointing
/// there. A split run resumes from its run's folder, not one step's (saturate::Error).
CheckpointFlags for_part(const CheckpointFlags& flags, int part, int parts);

/// Refuses (saturate::Error naming the setting) a checkpoint of another run; logs settings that
/// changed but can continue, and where the run resumes.
/// `total_steps`: this run's length, which the checkpoint must not be past.
void check_resumable(const LoadedCheckpoint& checkpoint, const nlohmann::json& recipe,
                     int64_t total_steps);

/// Prints why the run stopped as diverged and what to try, on `err`.
void print_divergence(std::ostream& err, const Divergence& d, const TrainOptions& o,
                      const std::string& last_checkpoint);
/// Refuses (exit 2) a --save-model path that is not FILE.safetensors or cannot be written.
void check_save_model_path(const std::string& path);
/// --save-model: writes the trained model and how to feed it (models/saved_model.h) and logs
/// where. Does nothing when the flag is not given.
/// `state`: the whole model's, gathered from a split run (gather_whole_state), else null.
void save_trained_model(const CheckpointFlags& flags, Model& model, const std::string& model_spec,
                        const std::string& data_spec, const TrainingInput& input, int64_t steps,
                        const std::vector<std::pair<std::string, at::Tensor>>* state = nullptr);

/// What a checkpoint must share with the run that continues it (check_resumable compares it).
nlohmann::json checkpoint_recipe(const std::string& model, const std::string& data,
                                 int64_t train_samples, int world_size, const TrainOptions& o);

}  // namespace saturate::cli
