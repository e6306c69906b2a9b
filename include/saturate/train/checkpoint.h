// SPDX-License-Identifier: Apache-2.0
#pragma once
// Training checkpoints: the state a run needs to continue bit for bit (TrainState), and a
// folder of them on disk (CheckpointStore) written atomically and checked before use.
//
//   CheckpointStore store("runs/ckpt", /*keep=*/3);
//   store.save(trainer.capture(), info);                 // runs/ckpt/step-00000120/
//   std::optional<LoadedCheckpoint> c = store.load_newest();  // the newest intact one
//   if (c) trainer.restore(c->state);
//
// On disk, DIR/step-NNNNNNNN/ holds state.pt (a LibTorch archive: the model's state tensors,
// the optimizer's state, the generators' states, the step records), meta.json (positions, the
// loss scaler, the caller's info) and MANIFEST.json (schema version, each file's size and
// CRC-32C, and its own CRC). A checkpoint is written in DIR/.tmp-step-N, every file synced,
// the folder renamed into place and DIR synced: a crash at any instant leaves the earlier
// checkpoints as they were, and at worst a .tmp-* folder that the next store removes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "saturate/telemetry/step_record.h"

namespace saturate {

/// Everything a Trainer needs to continue a run where it stopped (see Trainer::capture()).
struct TrainState {
  int64_t step = 0;            ///< optimizer steps done
  int64_t epoch = 0;           ///< epoch of the next batch
  int64_t batch_in_epoch = 0;  ///< batches of `epoch` already consumed
  std::vector<at::Tensor> model;  ///< Model::state_tensors(), host copies, in order
  std::string optimizer;          ///< the optimizer's state as LibTorch archive bytes
  nlohmann::json scaler;          ///< GradScaler::state_dict()
  at::Tensor cpu_generator;       ///< the default CPU generator's state
  std::vector<at::Tensor> cuda_generators;  ///< one per visible GPU (none on a CPU run)
  std::vector<StepRecord> records;          ///< the steps so far
  /// Index in `records` where each part of the run began: {0}, then one more per resume
  /// (the steady-state rate leaves out each part's warm-up steps).
  std::vector<int64_t> segment_starts;
  double train_wall_s = 0;  ///< training-loop time of the parts so far
  /// --adaptive-batch: the data source's batches per step and the LR multiplier so far.
  int64_t adaptive_per_step = 1;
  double adaptive_lr_multiplier = 1;
};

/// Shape and dtype of each state tensor ("[32,1,3,3] Float"): how a checkpoint is matched to
/// the model it is loaded into.
std::vector<std::string> tensor_fingerprint(const std::vector<at::Tensor>& tensors);

/// What Trainer::fit() asks at step boundaries to write checkpoints.
class CheckpointHook {
 public:
  virtual ~CheckpointHook() = default;
  /// Whether a checkpoint is due after `steps_done` steps. Under data parallel it is asked on
  /// every rank every 8 steps, and the ranks write when any says yes.
  virtual bool is_due(int64_t steps_done) = 0;
  /// Writes `state`; returns where (one process, or rank 0 of a data-parallel job).
  virtual std::string save(const TrainState& state) = 0;
  /// After a checkpoint at `steps_done`, on every rank (whether it wrote or not).
  virtual void saved(int64_t steps_done) { (void)steps_done; }
};

/// A checkpoint read back: the state, the caller's info and where it came from.
struct LoadedCheckpoint {
  TrainState state;
  nlohmann::json info;
  std::string path;  ///< the step-N folder
  /// One line per newer checkpoint that failed its checks and was passed over.
  std::vector<std::string> rejected;
};

class CheckpointStore {
 public:
  inline static constexpr int kSchemaVersion = 1;

  /// Keeps the newest `keep` (>= 1) checkpoints in `dir`. Touches nothing on disk: readers
  /// (every rank of a data-parallel job) and the one writer share the folder.
  explicit CheckpointStore(std::string dir, int keep = 3);

  /// Creates `dir` when missing (one level) and removes unfinished .tmp-* folders left by a
  /// crash; save() does it first if nobody has. Throws saturate::Error naming the folder when
  /// it cannot be created, is not a folder or is not writable. Only the writer may call it.
  void open_for_writing();

  /// Writes `state` with `info` (any JSON: the resolved recipe, the data) as
  /// DIR/step-<state.step>, replacing one of the same step, then removes the oldest beyond
  /// `keep`. Returns the folder. Throws saturate::RunFailure naming the path on an I/O failure
  /// (disk full, the folder gone; the earlier checkpoints are untouched then).
  std::string save(const TrainState& state, const nlohmann::json& info);

  /// The step-N folders, oldest first.
  std::vector<std::string> list() const;

  /// The newest checkpoint that passes its checks (manifest CRC, file sizes and CRCs, schema
  /// version, readable contents); those that fail are listed in `rejected`. nullopt when
  /// there are none (or no folder). Throws saturate::Error (one line naming DIR and the newest's problem)
  /// when there are checkpoints and none passes.
  std::optional<LoadedCheckpoint> load_newest() const;

  /// Reads one step-N folder; throws saturate::Error naming the file and the problem.
  static LoadedCheckpoint load(const std::string& checkpoint_dir);

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int keep_;
  bool is_open_ = false;
};

}  // namespace saturate
