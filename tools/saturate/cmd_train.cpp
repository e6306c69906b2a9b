// SPDX-License-Identifier: Apache-2.0
// saturate train: flags → TrainOptions, then the library trains and reports
// (report/train_report.h); this file wires the run up and picks the outputs.
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "command.h"
#include "exec_commands.h"
#include "recipe.h"
#include "run_sinks.h"
#include "train_checkpoints.h"
#include "train_pipeline.h"
#include "train_target.h"
#include "saturate/core/json.h"
#include "saturate/core/log.h"
#include "saturate/core/strings.h"
#include "saturate/data/loader.h"
#include "saturate/device/device_memory.h"
#include "saturate/models/model.h"
#include "saturate/report/context.h"
#include "saturate/report/train_report.h"
#include "saturate/train/staged_step.h"
#include "saturate/train/trainer.h"
#include "saturate/tune/plan.h"

namespace saturate::cli {
namespace {

struct TrainFlags {
  RecipeFlags recipe;
  CheckpointFlags checkpoints;
  PipelineFlags pipeline;
  std::string summary_json;
  std::string logdir;
  std::string trace;
  double sample_interval_ms = 1000;
  bool quiet = false;
  bool no_eval = false;
  std::string target;
};

void add_train_flags(CLI::App& app, TrainFlags& f) {
  add_recipe_flags(app, f.recipe, RecipeUse::kTrain);
  add_checkpoint_flags(app, f.checkpoints);
  add_pipeline_flags(app, f.pipeline);
  app.add_option("--summary-json", f.summary_json, "write the run summary as JSON to FILE");
  app.add_option("--logdir", f.logdir,
                 "write TensorBoard scalars and steps.jsonl (one line per step) into DIR");
  app.add_option("--trace", f.trace, "write a Chrome/Perfetto trace of the step phases to FILE");
  app.add_option("--sample-interval", f.sample_interval_ms,
                 "with --logdir: device sampling interval in ms (CPU, RSS; GPUs through NVML)")
      ->capture_default_str();
  app.add_flag("--no-eval", f.no_eval, "skip the evaluation of the validation and test splits");
  add_target_flag(app, f.target);
  app.add_flag("-q,--quiet", f.quiet, "no progress bar");
}

void apply_train_plan(const Plan& plan, const CLI::App& app, RecipeFlags& rf,
                      PipelineFlags& pipeline) {
  apply_plan(plan, app, rf, dist_env_from_environment().world_size);
  apply_plan_pipeline(plan, app, pipeline);
  SATURATE_LOG_INFO("train: plan ", rf.config, ": ", plan.config.describe(),
                    " (flags given on the command line override it)");
  if (plan.interrupted)
    SATURATE_LOG_WARN("train: ", rf.config, " is the partial plan of an interrupted tune");
}

void log_start(Model& model, const Recipe& recipe, const DatasetSplits& splits) {
  SATURATE_LOG_INFO("train: ", model.name(), " (", count_parameters(model), " parameters) on ",
                    recipe.device_reason, ", ", count_of(recipe.threads, "thread"), ", BLAS ",
                    recipe.probe.blas.name,
                    recipe.denormals_flushed ? ", denormals flushed" : ", denormals kept");
  SATURATE_LOG_INFO("train: data ", splits.description,
                    splits.validation.size() > 0
                        ? "; " + std::to_string(splits.validation.size()) + " held out for validation"
                        : std::string());
}

TrainSummary fit(Trainer& trainer, Loader& loader, const DatasetSplits& splits, RunSinks& sinks,
                 const DataParallelRun& dp) {
  try {
    return trainer.fit(loader, splits, sinks.sink(), &g_interrupted);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (!dp.is_distributed()) throw;
    throw_collective_failure(dp, "train", e);
  }
}

// One summary for the job: rank 0's (every rank holds the same weights). The exit code says
// how the run ended.
int report(const TrainReport& r, const TrainFlags& f, const CheckpointOptions& checkpoints,
           bool reports) {
  const TrainSummary& s = r.summary;
  if (reports) write_train_table(std::cout, r);
  if (reports && !f.summary_json.empty()) write_json_file(f.summary_json, train_report_to_json(r));
  if (s.divergence) {
    if (reports) print_divergence(std::cerr, *s.divergence, r.options, s.last_checkpoint);
    return static_cast<int>(ExitCode::kFailure);
  }
  if (!s.last_checkpoint.empty() && s.is_interrupted)
    SATURATE_LOG_INFO("train: stopped at step ", s.steps, "; saved ", s.last_checkpoint,
                      " (continue with --resume ", f.checkpoints.dir, ")");
  if (s.is_interrupted && g_terminated.load()) return static_cast<int>(ExitCode::kTerminated);
  return static_cast<int>(s.is_interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
}

}  // namespace

int run_train(const std::vector<std::string>& args) {
  TrainFlags f;
  RecipeFlags& rf = f.recipe;
  CLI::App app{"Train a model and report steady-state samples/s and test accuracy.",
               "saturate train"};
  add_train_flags(app, f);
  if (!parse_args(app, args)) return 0;
  std::optional<Plan> read;
  if (!rf.config.empty()) read = read_plan(rf.config);
  if (read && !read->exec.empty()) return run_exec_plan(*read, app.count("--steps") ? rf.train.steps : 0);
  check_pipeline_flags(f.pipeline, rf.train, pipeline_incompatible(rf, f.checkpoints, f.pipeline));
  const int split = f.pipeline.ranks_per_replica();  // one rank per stage or tensor share
  if (split > 1 && !app.count("--ranks") && !dist_env_from_environment().is_distributed())
    return run_as_ranks(split, "train", args);
  if (const int ranks = ranks_to_launch(rf, app, read ? &*read : nullptr, "train"))
    return run_as_ranks(ranks, "train", args);
  if (read) apply_train_plan(*read, app, rf, f.pipeline);
  settle_model_parallel(f.pipeline, rf, f.checkpoints, dist_env_from_environment().world_size);
  rf.train.evaluate = !f.no_eval;
  apply_target(f.target, rf.val_fraction, rf.train);
  rf.train.max_skipped_steps = f.checkpoints.max_skipped_steps;
  const Recipe recipe = resolve_recipe(rf, "train");
  const TrainOptions& opts = recipe.train;
  // A split model keeps a checkpoint folder per part (stage or share) under the run's.
  const int part = split > 1 ? dist_env_from_environment().rank % split : 0;
  const CheckpointOptions checkpoints = checkpoint_options(for_part(f.checkpoints, part, split));
  // Fail on an unwritable summary path now, not after the run.
  if (!f.summary_json.empty()) check_writable(f.summary_json, "--summary-json");
  if (!f.checkpoints.save_model.empty()) check_save_model_path(f.checkpoints.save_model);
  check_sink_paths(f.logdir, f.trace);
  const std::optional<LoadedCheckpoint> resume = find_resume(for_part(f.checkpoints, part, split));
  // With checkpoints, SIGTERM (a preemption) saves the run before it ends, as Ctrl-C does.
  if (!checkpoints.dir.empty()) stop_on_sigterm();
  // Data parallel when a launcher says so: each rank trains --batch-size samples of its shard,
  // gradients averaged, so the global batch is world × --batch-size.
  DataParallelRun dp = join_data_parallel(rf, recipe, "train", f.pipeline.ranks_per_replica());
  TrainingInput input = open_recipe_input(recipe, dp.device);
  Loader loader(*input.source, shard_for(dp, input.loader_options(opts.batch_size, opts.seed,
                                                                   rf.workers, rf.prefetch),
                                               f.pipeline.ranks_per_replica()));
  const nlohmann::json recipe_info = checkpoint_recipe(rf.model, rf.data, input.source->size(),
                                                       dp.env.world_size, opts);
  if (resume)
    check_resumable(*resume, recipe_info, opts.total_steps(loader.batches_per_epoch()));
  // After the data is in memory: the budget caps what training allocates, not the dataset.
  auto memory = make_device_memory(dp.device, recipe.memory_limit_bytes);
  seed_everything(opts.seed);
  auto model = make_model(rf.model, model_inputs_for(input));
  log_start(*model, recipe, input.splits);
  // Pipeline or tensor parallel: this rank trains its stage or its share of the model.
  const ModelParallelRun mp = build_model_parallel(f.pipeline, *model, model_inputs_for(input),
                                                   dp.group.get(), dp.device, opts,
                                                   recipe.memory_limit_bytes, dp.sync.get(), memory.get());
  Trainer trainer(*mp.trained, opts, dp.device, memory.get(), mp.sync);
  trainer.set_staged_step(mp.pipe.step.get());
  if (resume) trainer.restore(resume->state);
  agree_split_run(trainer, dp.group.get(), split, resume);
  std::optional<PeriodicCheckpoints> hook;
  if (!checkpoints.dir.empty()) {
    hook.emplace(checkpoints, recipe_info, /*is_writer=*/dp.env.rank < split);  // replica 0
    trainer.set_checkpoint_hook(&*hook);
  }
  RunSinks sinks(f.quiet, f.logdir, f.trace, f.sample_interval_ms, dp.env,
                 resume ? resume->state.step : -1);
  sinks.describe_run(run_context(recipe.probe, dp.device.str()), rf.model, rf.data, opts);
  TrainReport r;
  r.summary = fit(trainer, loader, input.splits, sinks, dp);
  if (dp.env.rank == 0) sinks.record_target(opts, r.summary);
  sinks.record_divergence(r.summary);
  const bool saves = !f.checkpoints.save_model.empty() && !r.summary.divergence;
  const auto whole = saves ? gather_whole_state(mp, *model, dp.group.get())
                           : std::vector<std::pair<std::string, at::Tensor>>();
  if (dp.env.rank == 0 && saves)
    save_trained_model(f.checkpoints, *model, rf.model, rf.data, input, r.summary.steps,
                       whole.empty() ? nullptr : &whole);
  sinks.finish(dp.group.get());
  describe_train_run(r, rf, recipe, dp, input, loader, *model, f.pipeline.ranks_per_replica());
  describe_model_parallel(r, mp, f.pipeline, dp.group.get());
  return report(r, f, checkpoints, /*reports=*/dp.env.rank == 0);
}

}  // namespace saturate::cli
