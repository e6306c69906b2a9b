// SPDX-License-Identifier: Apache-2.0
// saturate train: flags → TrainOptions, then the library trains and this file prints.
#include <cmath>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "command.h"
#include "saturate/core/json.h"
#include "saturate/core/log.h"
#include "saturate/core/units.h"
#include "saturate/data/dataset.h"
#include "saturate/device/device_memory.h"
#include "saturate/device/device_spec.h"
#include "saturate/device/probe.h"
#include "saturate/device/threads.h"
#include "saturate/models/model.h"
#include "saturate/report/context.h"
#include "saturate/telemetry/console_progress.h"
#include "saturate/telemetry/sampler.h"
#include "saturate/train/trainer.h"
#include "saturate/tune/plan.h"

namespace saturate::cli {
namespace {

struct TrainFlags {
  std::string model = "fmnist-cnn";
  std::string data = "fashion-mnist";
  std::string device = "auto";
  std::string optimizer = "adamw";
  std::string schedule = "cosine";
  std::string summary_json;
  std::string precision = "fp32";
  std::string memory_limit;
  std::string logdir;
  std::string trace;
  std::string config;  ///< plan.json from `saturate tune`
  int threads = 0;
  double sample_interval_ms = 1000;
  bool quiet = false;
  bool no_eval = false;
};

void print_summary(std::ostream& out, const TrainSummary& s, const TrainOptions& o,
                   const std::string& model, const std::string& data, const std::string& device,
                   int threads) {
  auto row = [&](const std::string& k, const std::string& v) {
    std::string key = k;
    key.resize(16, ' ');
    out << "  " << key << v << "\n";
  };
  out << "saturate train: " << model << " on " << data << ", " << device << ", " << threads
      << " threads" << (s.is_interrupted ? " (interrupted)" : "") << "\n";
  row("steps", std::to_string(s.steps) + " (" + format_fixed(s.epochs, 2) + " epochs, batch " +
                   std::to_string(o.batch_size) + ")");
  row("samples/s", format_fixed(s.samples_per_s, 1) + " (steady state)");
  row("step time", format_fixed(s.phases.step_ms, 2) + " ms: data " +
                       format_fixed(s.phases.data_wait_ms, 2) + ", forward " +
                       format_fixed(s.phases.forward_ms, 2) + ", backward " +
                       format_fixed(s.phases.backward_ms, 2) + ", optimizer " +
                       format_fixed(s.phases.optimizer_ms, 2));
  row("precision", to_string(o.precision) + (o.accumulate > 1
                                                 ? ", " + std::to_string(o.accumulate) +
                                                       " micro-batches per step"
                                                 : std::string()));
  if (s.peak_memory_bytes > 0) row("peak memory", format_bytes(s.peak_memory_bytes));
  if (o.precision == Precision::kFp16)
    row("loss scale", format_fixed(s.loss_scale, 0) + " (" + std::to_string(s.skipped_steps) +
                          " steps skipped for non-finite gradients)");
  row("train time", format_duration_s(s.train_wall_s));
  row("final loss", format_fixed(s.final_loss, 4) + " (mean of the last 50 steps)");
  if (!std::isnan(s.test_accuracy)) {
    row("test accuracy", format_fixed(100.0 * s.test_accuracy, 2) + " %");
    row("test loss", format_fixed(s.test_loss, 4));
  }
}

/// Takes what `plan` decided for every setting the command line did not give: flags given
/// explicitly override the plan, and the plan overrides the flags' defaults.
void apply_plan(const Plan& plan, const CLI::App& app, TrainFlags& f, TrainOptions& opts,
                LoaderFlags& loader) {
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  const TrainOptions& p = plan.config.train;
  if (!plan.model.empty() && !given("--model")) f.model = plan.model;
  if (!plan.data.empty() && !given("--data")) f.data = plan.data;
  if (!given("--batch-size")) opts.batch_size = p.batch_size;
  if (!given("--precision")) f.precision = to_string(p.precision);
  if (!given("--accumulate")) opts.accumulate = p.accumulate;
  if (!given("--checkpoint-segments")) opts.checkpoint_segments = p.checkpoint_segments;
  if (!given("--lr")) opts.lr = p.lr;
  if (!given("--warmup-steps")) opts.warmup_steps = p.warmup_steps;
  if (!given("--optimizer")) f.optimizer = to_string(p.optimizer);
  if (!given("--schedule")) f.schedule = to_string(p.schedule);
  if (!given("--threads")) f.threads = plan.config.threads;
  if (!given("--seed")) opts.seed = p.seed;
  if (!given("--workers")) loader.workers = plan.config.workers;
  if (!given("--prefetch")) loader.prefetch = plan.config.prefetch;
}

nlohmann::json nan_to_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

}  // namespace

int run_train(const std::vector<std::string>& args) {
  TrainOptions opts;
  TrainFlags f;
  CLI::App app{"Train a model and report steady-state samples/s and test accuracy.",
               "saturate train"};
  app.add_option("--config", f.config,
                 "train with the configuration in a plan.json from `saturate tune`; flags given "
                 "here override it");
  app.add_option("--model", f.model,
                 "fmnist-cnn, mlp, mlp-deep, resnet18-cifar, or a TorchScript file (PATH.pt)")
      ->capture_default_str();
  app.add_option("--data", f.data, kDataSpecHelp)->capture_default_str();
  app.add_option("--epochs", opts.epochs, "passes over the training split")->capture_default_str();
  app.add_option("--steps", opts.steps, "optimizer steps; overrides --epochs when > 0")
      ->capture_default_str();
  app.add_option("--batch-size", opts.batch_size, "samples per step")->capture_default_str();
  app.add_option("--lr", opts.lr, "peak learning rate")->capture_default_str();
  app.add_option("--optimizer", f.optimizer, "sgd or adamw")->capture_default_str();
  app.add_option("--momentum", opts.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", opts.weight_decay, "weight decay")->capture_default_str();
  app.add_option("--schedule", f.schedule, "constant or cosine (after warm-up)")
      ->capture_default_str();
  app.add_option("--warmup-steps", opts.warmup_steps, "linear LR warm-up; -1 = 2% of the run")
      ->capture_default_str();
  app.add_option("--device", f.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--threads", f.threads, "LibTorch intra-op threads; 0 = usable cores")
      ->capture_default_str();
  app.add_option("--seed", opts.seed, "seed for weights and data order")->capture_default_str();
  app.add_option("--precision", f.precision, "fp32, tf32 (CUDA), bf16, fp16 (CUDA) or auto")
      ->capture_default_str();
  app.add_option("--accumulate", opts.accumulate,
                 "micro-batches per optimizer step (same effective --batch-size)")
      ->capture_default_str();
  app.add_option("--checkpoint-segments", opts.checkpoint_segments,
                 "recompute activations in this many segments (0 = off)")
      ->capture_default_str();
  app.add_option("--memory-limit", f.memory_limit,
                 "cap device memory, e.g. 2GiB (CPU: a budget; CUDA: a smaller card)");
  app.add_option("--summary-json", f.summary_json, "write the run summary as JSON to FILE");
  app.add_option("--logdir", f.logdir,
                 "write TensorBoard scalars and steps.jsonl (one line per step) into DIR");
  app.add_option("--trace", f.trace, "write a Chrome/Perfetto trace of the step phases to FILE");
  app.add_option("--sample-interval", f.sample_interval_ms,
                 "with --logdir: device sampling interval in ms (CPU, RSS; GPUs through NVML)")
      ->capture_default_str();
  LoaderFlags loader_flags;
  add_loader_flags(app, loader_flags);
  app.add_flag("--no-eval", f.no_eval, "skip the test-split evaluation");
  app.add_flag("-q,--quiet", f.quiet, "no progress bar");
  if (!parse_args(app, args)) return 0;
  if (!f.config.empty()) {
    const Plan plan = read_plan(f.config);
    apply_plan(plan, app, f, opts, loader_flags);
    SATURATE_LOG_INFO("train: plan ", f.config, ": ", plan.config.describe(),
                      " (flags given on the command line override it)");
  }

  opts.optimizer = parse_optimizer(f.optimizer);
  opts.schedule = parse_schedule(f.schedule);
  opts.evaluate = !f.no_eval;
  const Precision requested_precision = parse_precision(f.precision);
  const int64_t memory_limit =
      f.memory_limit.empty() ? 0 : parse_bytes(f.memory_limit, "--memory-limit");
  // Fail on an unwritable summary path now, not after the run.
  if (!f.summary_json.empty()) check_writable(f.summary_json, "--summary-json");
  // Sinks open their files now, so a bad --logdir or --trace fails before any work.
  ConsoleProgress progress(std::cerr, stderr_is_tty());
  MultiSink sinks;
  if (!f.quiet) sinks.add(&progress);
  const FileSinks file_sinks(f.logdir, f.trace, sinks);
  // With --logdir, device readings (CPU, RSS, GPUs through NVML) are logged beside the steps.
  // Built now so a bad interval fails before any work.
  std::optional<DeviceSampler> sampler;
  if (!f.logdir.empty()) {
    SamplerOptions sampler_options;
    sampler_options.interval_ms = f.sample_interval_ms;
    sampler.emplace(sampler_options);
  }

  const DeviceSpec spec = DeviceSpec::parse(f.device);
  const int threads = configure_threads(f.threads);
  const DeviceProbe probe = probe_devices();
  const DeviceChoice choice = select_device(spec, probe);
  const PrecisionChoice precision = resolve_precision(requested_precision, choice.device, probe);
  opts.precision = precision.precision;
  opts.validate();
  if (requested_precision == Precision::kAuto)
    SATURATE_LOG_INFO("train: --precision auto: ", precision.reason);
  TrainingInput input = open_training_input(f.data, loader_flags, opts.batch_size, opts.seed,
                                            choice.device);
  const DatasetSplits& splits = input.splits;
  // After the data is in memory: the budget caps what training allocates, not the dataset.
  auto memory = make_device_memory(choice.device, memory_limit);

  seed_everything(opts.seed);
  auto model = make_model(f.model, {input.sample_shape, input.num_classes});
  SATURATE_LOG_INFO("train: ", model->name(), " (", count_parameters(*model), " parameters) on ",
                    choice.reason, ", ", threads, " threads, BLAS ", probe.blas.name);
  SATURATE_LOG_INFO("train: data ", splits.description);

  Trainer trainer(*model, opts, choice.device, memory.get());
  std::optional<SampledSink> sampled;
  TelemetrySink* sink = &sinks;
  if (sampler) {
    sampler->start();
    sampled.emplace(*sampler, sinks);
    sink = &*sampled;
  }
  const TrainSummary s = trainer.fit(*input.loader, splits, sink, &g_interrupted);
  if (sampler) sampler->stop();
  const std::string device = choice.device.str();
  print_summary(std::cout, s, opts, model->name(), f.data, device, threads);

  if (!f.summary_json.empty()) {
    nlohmann::json j;
    j["schema_version"] = 1;
    j["model"] = model->name();
    j["data"] = f.data;
    const LoaderStats ls = input.loader->stats();
    j["loader"] = {{"workers", loader_flags.workers},
                   {"prefetch", loader_flags.prefetch},
                   {"samples", ls.samples},
                   {"cache_hit_rate", ls.cache_hit_rate()},
                   {"worker_busy_s", ls.worker_busy_s},
                   {"wait_s", ls.wait_s}};
    j["device"] = device;
    j["threads"] = threads;
    j["batch_size"] = opts.batch_size;
    j["optimizer"] = to_string(opts.optimizer);
    j["lr"] = opts.lr;
    j["schedule"] = to_string(opts.schedule);
    j["seed"] = opts.seed;
    j["precision"] = to_string(opts.precision);
    j["accumulate"] = opts.accumulate;
    j["checkpoint_segments"] = opts.checkpoint_segments;
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
    j["interrupted"] = s.is_interrupted;
    j["phases_ms"] = {{"data_wait", s.phases.data_wait_ms},
                      {"host_to_device", s.phases.host_to_device_ms},
                      {"forward", s.phases.forward_ms},
                      {"backward", s.phases.backward_ms},
                      {"optimizer", s.phases.optimizer_ms},
                      {"other", s.phases.other_ms},
                      {"step", s.phases.step_ms}};
    j["context"] = run_context(probe, device);
    write_json_file(f.summary_json, j);
  }
  return static_cast<int>(s.is_interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
}

}  // namespace saturate::cli
