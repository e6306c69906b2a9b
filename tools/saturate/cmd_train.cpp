// SPDX-License-Identifier: Apache-2.0
// saturate train: flags → TrainOptions, then the library trains and this file prints.
#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "command.h"
#include "recipe.h"
#include "train_checkpoints.h"
#include "saturate/data/loader.h"
#include "saturate/core/json.h"
#include "saturate/core/log.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/data/dataset.h"
#include "saturate/device/device_memory.h"
#include "saturate/device/device_spec.h"
#include "saturate/device/probe.h"
#include "saturate/device/threads.h"
#include "saturate/models/model.h"
#include "saturate/report/context.h"
#include "saturate/telemetry/console_progress.h"
#include "saturate/telemetry/device_sampler.h"
#include "saturate/train/trainer.h"
#include "saturate/tune/plan.h"

namespace saturate::cli {
namespace {

struct TrainFlags {
  std::string summary_json;
  std::string logdir;
  std::string trace;
  double sample_interval_ms = 1000;
  bool quiet = false;
  bool no_eval = false;
};

void print_summary(std::ostream& out, const TrainSummary& s, const TrainOptions& o,
                   const std::string& model, const std::string& data, const std::string& device,
                   int world,
                   int threads) {
  auto row = [&](const std::string& k, const std::string& v) {
    std::string key = k;
    key.resize(16, ' ');
    out << "  " << key << v << "\n";
  };
  out << "saturate train: " << model << " on " << data << ", " << device << ", " << threads
      << " threads" << (s.is_interrupted ? " (interrupted)" : "") << "\n";
  row("steps", std::to_string(s.steps) + " (" + format_fixed(s.epochs, 2) + " epochs, batch " +
                   std::to_string(o.batch_size) +
                   (world > 1 ? " per rank × " + std::to_string(world) + " ranks = " +
                                    std::to_string(o.batch_size * world)
                              : std::string()) +
                   ")");
  row("samples/s", world > 1 ? format_fixed(s.samples_per_s * world, 1) + " (steady state, " +
                                   std::to_string(world) + " ranks in step: " +
                                   format_fixed(s.samples_per_s, 1) + " on rank 0)"
                             : format_fixed(s.samples_per_s, 1) + " (steady state)");
  row("step time", format_fixed(s.phases.step_ms, 2) + " ms: data " +
                       format_fixed(s.phases.data_wait_ms, 2) + ", forward " +
                       format_fixed(s.phases.forward_ms, 2) + ", backward " +
                       format_fixed(s.phases.backward_ms, 2) + ", optimizer " +
                       format_fixed(s.phases.optimizer_ms, 2) +
                       (world > 1 ? ", communication " + format_fixed(s.phases.communication_ms, 2)
                                  : std::string()));
  row("precision", to_string(o.precision) +
                       (o.memory_format != MemoryFormat::kContiguous
                            ? ", " + to_string(o.memory_format)
                            : std::string()) +
                       (o.accumulate > 1
                            ? ", " + std::to_string(o.accumulate) + " micro-batches per step"
                            : std::string()));
  if (s.peak_memory_bytes > 0) row("peak memory", format_bytes(s.peak_memory_bytes));
  if (o.precision == Precision::kFp16)
    row("loss scale", format_fixed(s.loss_scale, 0) + " (" + std::to_string(s.skipped_steps) +
                          " steps skipped for non-finite gradients)");
  row("train time", format_duration_s(s.train_wall_s));
  if (s.resumed_from_step >= 0) row("resumed", "from step " + std::to_string(s.resumed_from_step));
  if (!s.last_checkpoint.empty()) row("checkpoint", s.last_checkpoint);
  row("final loss", format_fixed(s.final_loss, 4) + " (mean of the last 50 steps)");
  if (!std::isnan(s.val_accuracy)) {
    row("val accuracy", format_fixed(100.0 * s.val_accuracy, 2) + " %");
    row("val loss", format_fixed(s.val_loss, 4));
  }
  if (!std::isnan(s.test_accuracy)) {
    row("test accuracy", format_fixed(100.0 * s.test_accuracy, 2) + " %");
    row("test loss", format_fixed(s.test_loss, 4));
  }
}

nlohmann::json nan_to_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

}  // namespace

int run_train(const std::vector<std::string>& args) {
  RecipeFlags rf;
  TrainFlags f;
  CheckpointFlags cf;
  CLI::App app{"Train a model and report steady-state samples/s and test accuracy.",
               "saturate train"};
  add_recipe_flags(app, rf, RecipeUse::kTrain);
  add_checkpoint_flags(app, cf);
  app.add_option("--summary-json", f.summary_json, "write the run summary as JSON to FILE");
  app.add_option("--logdir", f.logdir,
                 "write TensorBoard scalars and steps.jsonl (one line per step) into DIR");
  app.add_option("--trace", f.trace, "write a Chrome/Perfetto trace of the step phases to FILE");
  app.add_option("--sample-interval", f.sample_interval_ms,
                 "with --logdir: device sampling interval in ms (CPU, RSS; GPUs through NVML)")
      ->capture_default_str();
  app.add_flag("--no-eval", f.no_eval, "skip the evaluation of the validation and test splits");
  app.add_flag("-q,--quiet", f.quiet, "no progress bar");
  if (!parse_args(app, args)) return 0;
  std::optional<Plan> read;
  if (!rf.config.empty()) read = read_plan(rf.config);
  if (const int ranks = ranks_to_launch(rf, app, read ? &*read : nullptr, "train"))
    return run_as_ranks(ranks, "train", args);
  if (read) {
    const Plan& plan = *read;
    apply_plan(plan, app, rf, dist_env_from_environment().world_size);
    SATURATE_LOG_INFO("train: plan ", rf.config, ": ", plan.config.describe(),
                      " (flags given on the command line override it)");
    if (plan.interrupted)
      SATURATE_LOG_WARN("train: ", rf.config, " is the partial plan of an interrupted tune");
  }
  rf.train.evaluate = !f.no_eval;
  rf.train.max_skipped_steps = cf.max_skipped_steps;
  const Recipe recipe = resolve_recipe(rf, "train");
  TrainOptions opts = recipe.train;
  const int64_t memory_limit = recipe.memory_limit_bytes;
  const CheckpointOptions checkpoints = checkpoint_options(cf);
  // Fail on an unwritable summary path now, not after the run.
  if (!f.summary_json.empty()) check_writable(f.summary_json, "--summary-json");
  check_sink_paths(f.logdir, f.trace);
  const std::optional<LoadedCheckpoint> resume = find_resume(cf);
  // With checkpoints, SIGTERM (a preemption) saves the run before it ends, as Ctrl-C does.
  if (!checkpoints.dir.empty()) stop_on_sigterm();
  const int threads = recipe.threads;
  const DeviceProbe& probe = recipe.probe;
  // Data parallel when a launcher says so: each rank trains --batch-size samples of its shard,
  // gradients averaged, so the global batch is world × --batch-size.
  DataParallelRun dp = join_data_parallel(rf, recipe, "train");
  const DistEnv& dist = dp.env;
  const c10::Device device = dp.device;
  TrainingInput input = open_recipe_input(recipe, dp.device);
  Loader loader(*input.source, shard_for(dp, input.loader_options(opts.batch_size, opts.seed,
                                                                   rf.workers, rf.prefetch)));
  const DatasetSplits& splits = input.splits;
  // What a checkpoint must share with the run that continues it.
  const nlohmann::json recipe_info = {
      {"model", rf.model},          {"data", rf.data},
      {"train_samples", input.source->size()}, {"world_size", dist.world_size},
      {"batch_size", opts.batch_size}, {"accumulate", opts.accumulate},
      {"optimizer", to_string(opts.optimizer)}, {"precision", to_string(opts.precision)},
      {"seed", opts.seed},          {"steps", opts.steps},
      {"epochs", opts.epochs},      {"lr", opts.lr},
      {"schedule", to_string(opts.schedule)}, {"clip_grad_norm", opts.clip_grad_norm}};
  if (resume) {
    check_resumable(*resume, recipe_info,
                    opts.steps > 0 ? opts.steps : opts.epochs * loader.batches_per_epoch());
  }
  // After the data is in memory: the budget caps what training allocates, not the dataset.
  auto memory = make_device_memory(device, memory_limit);

  seed_everything(opts.seed);
  auto model = make_model(rf.model, {input.sample_shape, input.num_classes});
  SATURATE_LOG_INFO("train: ", model->name(), " (", count_parameters(*model), " parameters) on ",
                    recipe.device_reason, ", ", threads, " threads, BLAS ", probe.blas.name,
                    recipe.denormals_flushed ? ", denormals flushed" : ", denormals kept");
  SATURATE_LOG_INFO("train: data ", splits.description,
                    splits.validation.size() > 0
                        ? "; " + std::to_string(splits.validation.size()) + " held out for validation"
                        : std::string());

  Trainer trainer(*model, opts, device, memory.get(), dp.sync.get());
  if (resume) trainer.restore(resume->state);
  std::optional<PeriodicCheckpoints> hook;
  if (!checkpoints.dir.empty()) {
    hook.emplace(checkpoints, recipe_info, /*is_writer=*/dist.rank == 0);
    trainer.set_checkpoint_hook(&*hook);
  }
  // Sinks open their files once the run is known to go ahead; a resumed run appends to the logs
  // of its earlier part. With --logdir, device readings (CPU, RSS, GPUs through NVML) are
  // logged beside the steps.
  ConsoleProgress progress(std::cerr, stderr_is_tty());
  MultiSink sinks;
  if (!f.quiet) sinks.add(&progress);
  FileSinks file_sinks(f.logdir, f.trace, sinks, dist, resume ? resume->state.step : -1);
  std::optional<DeviceSampler> sampler;
  if (!f.logdir.empty()) {
    SamplerOptions sampler_options;
    sampler_options.interval_ms = f.sample_interval_ms;
    sampler.emplace(sampler_options);
  }
  std::optional<SampledSink> sampled;
  TelemetrySink* sink = &sinks;
  if (sampler) {
    sampler->start();
    sampled.emplace(*sampler, sinks);
    sink = &*sampled;
  }
  TrainSummary s;
  try {
    s = trainer.fit(loader, splits, sink, &g_interrupted);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (!dist.is_distributed()) throw;
    throw_collective_failure(dp, "train", e);
  }
  if (sampler) sampler->stop();
  file_sinks.finish(dp.group.get());
  const std::string device_name = device.str();
  // One summary for the job: rank 0's (every rank holds the same weights).
  const bool reports = dist.rank == 0;
  if (reports) print_summary(std::cout, s, opts, model->name(), rf.data, device_name,
                             dist.world_size, threads);

  if (reports && !f.summary_json.empty()) {
    nlohmann::json j;
    j["schema_version"] = 1;
    j["model"] = model->name();
    j["data"] = rf.data;
    const LoaderStats ls = loader.stats();
    j["loader"] = {{"workers", rf.workers},
                   {"prefetch", rf.prefetch},
                   {"samples", ls.samples},
                   {"cache_hit_rate", ls.cache_hit_rate()},
                   {"worker_busy_s", ls.worker_busy_s},
                   {"wait_s", ls.wait_s}};
    j["device"] = device_name;
    j["threads"] = threads;
    j["batch_size"] = opts.batch_size;
    j["world_size"] = dist.world_size;
    j["global_batch_size"] = opts.batch_size * dist.world_size;
    // Ranks step together (each waits for the all-reduce), so the job makes world × rank 0's.
    j["job_samples_per_s"] = s.samples_per_s * dist.world_size;
    j["optimizer"] = to_string(opts.optimizer);
    j["lr"] = opts.lr;
    j["clip_grad_norm"] = opts.clip_grad_norm;
    j["schedule"] = to_string(opts.schedule);
    j["seed"] = opts.seed;
    j["precision"] = to_string(opts.precision);
    j["accumulate"] = opts.accumulate;
    j["recompute_segments"] = opts.recompute_segments;
    j["memory_format"] = to_string(opts.memory_format);
    j["memory_limit_bytes"] = memory_limit;
    j["peak_memory_bytes"] = s.peak_memory_bytes;
    j["skipped_steps"] = s.skipped_steps;
    j["loss_scale"] = s.loss_scale;
    j["steps"] = s.steps;
    j["samples"] = s.samples;
    j["epochs"] = s.epochs;
    j["samples_per_s"] = s.samples_per_s;
    j["train_wall_s"] = s.train_wall_s;
    j["final_loss"] = s.final_loss;
    j["test_accuracy"] = nan_to_null(s.test_accuracy);
    j["test_loss"] = nan_to_null(s.test_loss);
    j["val_accuracy"] = nan_to_null(s.val_accuracy);
    j["val_loss"] = nan_to_null(s.val_loss);
    j["val_samples"] = splits.validation.size();
    j["eval_batch_size"] = opts.eval_batch_size;
    j["interrupted"] = s.is_interrupted;
    j["terminated"] = g_terminated.load();
    j["resumed_from_step"] = s.resumed_from_step;
    j["last_checkpoint"] = s.last_checkpoint;
    j["divergence"] = divergence_json(s.divergence);
    j["phases_ms"] = {{"data_wait", s.phases.data_wait_ms},
                      {"host_to_device", s.phases.host_to_device_ms},
                      {"forward", s.phases.forward_ms},
                      {"backward", s.phases.backward_ms},
                      {"optimizer", s.phases.optimizer_ms},
                      {"communication", s.phases.communication_ms},
                      {"other", s.phases.other_ms},
                      {"step", s.phases.step_ms}};
    j["context"] = run_context(probe, device_name);
    write_json_file(f.summary_json, j);
  }
  if (s.divergence) {
    if (reports) print_divergence(std::cerr, *s.divergence, opts, s.last_checkpoint);
    return static_cast<int>(ExitCode::kFailure);
  }
  if (!s.last_checkpoint.empty() && s.is_interrupted)
    SATURATE_LOG_INFO("train: stopped at step ", s.steps, "; saved ", s.last_checkpoint,
                      " (continue with --resume ", checkpoints.dir, ")");
  if (s.is_interrupted && g_terminated.load()) return static_cast<int>(ExitCode::kTerminated);
  return static_cast<int>(s.is_interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
}

}  // namespace saturate::cli
