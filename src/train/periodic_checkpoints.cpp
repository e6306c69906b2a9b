// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/periodic_checkpoints.h"

#include "saturate/core/error.h"

namespace saturate {
namespace {

double steady_now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string shown(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

PeriodicCheckpoints::PeriodicCheckpoints(CheckpointOptions options, nlohmann::json info,
                                         bool is_writer, Clock clock)
    : options_(std::move(options)),
      info_(std::move(info)),
      is_writer_(is_writer),
      clock_(clock ? std::move(clock) : Clock(steady_now_s)),
      store_(options_.dir, options_.keep) {
  SATURATE_CHECK(options_.every_steps >= 0, "checkpoint: --checkpoint-every must not be negative, got ",
                 options_.every_steps);
  SATURATE_CHECK(options_.interval_s >= 0, "checkpoint: --checkpoint-interval must not be negative");
  if (is_writer_) store_.open_for_writing();
  last_s_ = clock_();
}

bool PeriodicCheckpoints::is_due(int64_t steps_done) {
  if (options_.every_steps > 0 && steps_done % options_.every_steps == 0) return true;
  return options_.interval_s > 0 && clock_() - last_s_ >= options_.interval_s;
}

std::string PeriodicCheckpoints::save(const TrainState& state) {
  if (!is_writer_) return "";
  const double start = clock_();
  std::string where = store_.save(state, info_);
  write_s_ += clock_() - start;
  ++saves_;
  return where;
}

void PeriodicCheckpoints::saved(int64_t /*steps_done*/) { last_s_ = clock_(); }

ResumeCheck check_resume(const nlohmann::json& theirs, const nlohmann::json& mine) {
  ResumeCheck out;
  // Settings the saved state depends on: the tensors (model), the sample order and what a
  // step is (data, world size, batch, accumulation, seed), the optimizer's state layout and
  // the loss scaler (precision).
  static const char* kMustMatch[] = {"model",      "data",       "train_samples", "world_size",
                                     "batch_size", "accumulate", "optimizer",     "precision",
                                     "seed"};
  static const char* kMayDiffer[] = {"steps", "lr", "schedule", "clip_grad_norm"};
  for (const char* key : kMustMatch) {
    const nlohmann::json a = theirs.value(key, nlohmann::json());
    const nlohmann::json b = mine.value(key, nlohmann::json());
    if (a == b) continue;
    out.refusal = std::string("the checkpoint is of another run: its ") + key + " is " +
                  shown(a) + ", this run's is " + shown(b);
    return out;
  }
  for (const char* key : kMayDiffer) {
    const nlohmann::json a = theirs.value(key, nlohmann::json());
    const nlohmann::json b = mine.value(key, nlohmann::json());
    if (a != b)
      out.warnings.push_back(std::string(key) + " was " + shown(a) + " in the checkpoint's run, " +
                             shown(b) + " now");
  }
  return out;
}

}  // namespace saturate
