// SPDX-License-Identifier: Apache-2.0
#include "train_checkpoints.h"

#include <sys/stat.h>

#include <cmath>
#include <ostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "command.h"
#include "saturate/core/error.h"
#include "saturate/core/log.h"
#include "saturate/core/units.h"
#include "saturate/models/saved_model.h"

namespace saturate::cli {
namespace {

std::string number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : "inf";
  std::ostringstream s;
  s << v;
  return s.str();
}

bool is_checkpoint_folder(const std::string& dir) {
  struct stat st {};
  return ::stat((dir + "/MANIFEST.json").c_str(), &st) == 0;
}

}  // namespace

void add_checkpoint_flags(CLI::App& app, CheckpointFlags& f) {
  app.add_option("--checkpoint-dir", f.dir,
                 "write training checkpoints into DIR (periodically, on SIGTERM/SIGINT and at the "
                 "end); a resumed run continues bit for bit");
  app.add_option("--checkpoint-every", f.every_steps,
                 "with --checkpoint-dir: a checkpoint every N optimizer steps");
  app.add_option("--checkpoint-interval", f.interval,
                 "with --checkpoint-dir: a checkpoint every DURATION of training (e.g. 10min, "
                 "30s; default 10min unless --checkpoint-every is given)");
  app.add_option("--keep-checkpoints", f.keep, "keep the newest K checkpoints")
      ->capture_default_str();
  app.add_option("--resume", f.resume,
                 "continue from the newest intact checkpoint in DIR, or 'auto': --checkpoint-dir's "
                 "newest when there is one (a restarted job resumes by itself)");
  app.add_option("--max-skipped-steps", f.max_skipped_steps,
                 "fp16: stop as diverged after N optimizer steps in a row skipped for non-finite "
                 "gradients")
      ->capture_default_str();
  app.add_option("--save-model", f.save_model,
                 "write the trained weights to FILE.safetensors (Python: safetensors.torch."
                 "load_file, then load_state_dict); --model FILE.safetensors trains or evaluates "
                 "them again");
}

void check_save_model_path(const std::string& path) {
  SATURATE_CHECK(is_saved_model_path(path), "train: --save-model ", path,
                 ": the file name must end in .safetensors");
  check_writable(path, "--save-model");
}

void save_trained_model(const CheckpointFlags& f, Model& model, const std::string& model_spec,
                        const std::string& data_spec, const TrainingInput& input, int64_t steps,
                        const std::vector<std::pair<std::string, at::Tensor>>* state) {
  if (f.save_model.empty()) return;
  SavedModelInfo info;
  // A model loaded from a saved one is saved as the layers it was built from.
  info.model = is_saved_model_path(model_spec) ? read_saved_model_info(model_spec).model : model_spec;
  info.data = data_spec;
  info.sample_shape = input.sample_shape;
  info.num_classes = input.num_classes;
  info.tokens = input.corpus != nullptr;
  info.normalize_mean = input.splits.normalize_mean;
  info.normalize_std = input.splits.normalize_std;
  info.steps = steps;
  save_model(model, f.save_model, info, state);
  SATURATE_LOG_INFO("train: saved the model to ", f.save_model);
}

CheckpointOptions checkpoint_options(const CheckpointFlags& f) {
  CheckpointOptions o;
  o.dir = f.dir;
  if (o.dir.empty() && !f.resume.empty() && f.resume != "auto") o.dir = f.resume;
  SATURATE_CHECK(f.resume != "auto" || !f.dir.empty(),
                 "train: --resume auto needs --checkpoint-dir (where to look)");
  SATURATE_CHECK(!o.dir.empty() || (f.every_steps == 0 && f.interval.empty()),
                 "train: --checkpoint-every and --checkpoint-interval need --checkpoint-dir");
  SATURATE_CHECK(f.every_steps >= 0, "train: --checkpoint-every must not be negative, got ",
                 f.every_steps);
  SATURATE_CHECK(f.keep >= 1, "train: --keep-checkpoints must be at least 1, got ", f.keep);
  o.every_steps = f.every_steps;
  o.interval_s = f.interval.empty() ? (f.every_steps > 0 ? 0.0 : 600.0)
                                    : parse_duration_s(f.interval, "--checkpoint-interval");
  o.keep = f.keep;
  return o;
}

CheckpointFlags for_part(const CheckpointFlags& f, int part, int parts) {
  if (parts <= 1) return f;
  CheckpointFlags out = f;
  const std::string sub = "/part-" + std::to_string(part) + "-of-" + std::to_string(parts);
  if (!out.dir.empty()) out.dir += sub;
  if (!out.resume.empty() && out.resume != "auto") {
    SATURATE_CHECK(!is_checkpoint_folder(out.resume), "train: --resume ", out.resume,
                   ": a model split over processes resumes from its run's checkpoint folder (the "
                   "one holding part-K-of-N), not from one step's");
    out.resume += sub;
  }
  return out;
}

std::optional<LoadedCheckpoint> find_resume(const CheckpointFlags& f) {
  if (f.resume.empty()) return std::nullopt;
  const bool is_auto = f.resume == "auto";
  const std::string dir = is_auto ? f.dir : f.resume;
  std::optional<LoadedCheckpoint> c;
  if (!is_auto && is_checkpoint_folder(dir)) {
    c = CheckpointStore::load(dir);  // one step-N folder named directly
  } else {
    struct stat st {};
    SATURATE_CHECK(is_auto || ::stat(dir.c_str(), &st) == 0, "train: --resume ", dir,
                   " does not exist");
    c = CheckpointStore(dir).load_newest();
    SATURATE_CHECK(c || is_auto, "train: --resume ", dir, " holds no checkpoint");
  }
  if (!c) {
    SATURATE_LOG_INFO("train: no checkpoint in ", dir, " yet; starting from step 0");
    return c;
  }
  for (const std::string& why : c->rejected) SATURATE_LOG_WARN("train: passed over: ", why);
  return c;
}

void check_resumable(const LoadedCheckpoint& c, const nlohmann::json& recipe,
                     int64_t total_steps) {
  const ResumeCheck check = check_resume(c.info, recipe);
  SATURATE_CHECK(check.refusal.empty(), "train: --resume ", c.path, ": ", check.refusal);
  SATURATE_CHECK(c.state.step <= total_steps, "train: --resume ", c.path, ": the checkpoint is at step ",
                 c.state.step, ", past this run's ", total_steps, " steps");
  for (const std::string& w : check.warnings)
    SATURATE_LOG_WARN("train: --resume ", c.path, ": ", w,
                      "; the resumed run is not the one the checkpoint's run would have been");
  SATURATE_LOG_INFO("train: resuming from ", c.path, " (step ", c.state.step, ")");
}

void print_divergence(std::ostream& err, const Divergence& d, const TrainOptions& o,
                      const std::string& last_checkpoint) {
  err << "saturate: error: training diverged at step " << d.step << ": " << d.reason << "\n";
  err << "  last finite loss: "
      << (d.last_finite_step >= 0 ? number(d.last_finite_loss) + " at step " +
                                        std::to_string(d.last_finite_step)
                                  : std::string("none"))
      << "\n";
  err << "  learning rate " << number(d.lr);
  if (o.precision == Precision::kFp16) err << ", loss scale " << number(d.loss_scale);
  err << "\n  gradient norms before it:";
  for (double g : d.grad_norms) err << " " << (g < 0 ? std::string("?") : number(g));
  err << "\n  try: a lower --lr (now " << number(o.lr) << ")";
  if (o.clip_grad_norm <= 0) err << ", --clip-grad-norm 1.0";
  if (o.precision == Precision::kFp16) err << ", --precision bf16 (no overflow to skip)";
  err << "\n";
  err << "  last good checkpoint: " << (last_checkpoint.empty() ? "none" : last_checkpoint) << "\n";
}

nlohmann::json checkpoint_recipe(const std::string& model, const std::string& data,
                                 int64_t train_samples, int world_size, const TrainOptions& o) {
  return {{"model", model},          {"data", data},
          {"train_samples", train_samples}, {"world_size", world_size},
          {"batch_size", o.batch_size}, {"accumulate", o.accumulate},
          {"optimizer", to_string(o.optimizer)}, {"precision", to_string(o.precision)},
          {"seed", o.seed},             {"steps", o.steps},
          {"epochs", o.epochs},         {"lr", o.lr},
          {"schedule", to_string(o.schedule)}, {"clip_grad_norm", o.clip_grad_norm}};
}

}  // namespace saturate::cli
