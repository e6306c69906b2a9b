// SPDX-License-Identifier: Apache-2.0
#pragma once
// When a run writes checkpoints, and whether a checkpoint can continue this run.
//
//   CheckpointOptions co;  co.dir = "runs/ckpt";  co.every_steps = 500;
//   PeriodicCheckpoints hook(co, recipe_json, /*is_writer=*/rank == 0);
//   trainer.set_checkpoint_hook(&hook);   // fit() saves every 500 steps, on a stop and at the end
//
//   ResumeCheck c = check_resume(checkpoint.info, recipe_json);
//   if (!c.refusal.empty()) fail(c.refusal);            // another model, data, world size, ...

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "saturate/train/checkpoint.h"

namespace saturate {

struct CheckpointOptions {
  std::string dir;            ///< where checkpoints go; empty: none
  int64_t every_steps = 0;    ///< > 0: after every this many optimizer steps
  double interval_s = 600;    ///< > 0: once this long has passed since the last (or the start)
  int keep = 3;               ///< the newest this many are kept
};

/// The CheckpointHook of a run: due every `every_steps` steps and/or every `interval_s` seconds
/// of wall time; writes to a CheckpointStore when this process is the writer (rank 0).
class PeriodicCheckpoints : public CheckpointHook {
 public:
  using Clock = std::function<double()>;  ///< seconds on a steady clock
  /// `info` (the resolved recipe) goes into every checkpoint for check_resume(). Throws
  /// saturate::Error for bad options; the writer's folder is created (and checked) now.
  PeriodicCheckpoints(CheckpointOptions options, nlohmann::json info, bool is_writer,
                      Clock clock = {});
  bool is_due(int64_t steps_done) override;
  std::string save(const TrainState& state) override;
  void saved(int64_t steps_done) override;
  int64_t saves() const { return saves_; }
  double write_s() const { return write_s_; }  ///< time spent in save(), all checkpoints

 private:
  CheckpointOptions options_;
  nlohmann::json info_;
  bool is_writer_;
  Clock clock_;
  CheckpointStore store_;
  double last_s_;
  int64_t saves_ = 0;
  double write_s_ = 0;
};

/// How a checkpoint's recipe (`theirs`, its info) relates to this run's (`mine`).
struct ResumeCheck {
  /// One line naming the first setting that differs in a way the run cannot continue from
  /// (model, data, training samples, world size, batch size, accumulation, optimizer,
  /// precision, seed); empty when it can.
  std::string refusal;
  /// Settings that differ but can continue (steps, learning rate, schedule, clipping): the
  /// resumed run is then not the one the checkpoint's run would have been.
  std::vector<std::string> warnings;
};
ResumeCheck check_resume(const nlohmann::json& theirs, const nlohmann::json& mine);

}  // namespace saturate
