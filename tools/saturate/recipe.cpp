// SPDX-License-Identifier: Apache-2.0
#include "recipe.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <CLI/CLI.hpp>

#include "command.h"
#include "saturate/core/error.h"
#include "saturate/core/log.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/device/device_spec.h"
#include "saturate/device/threads.h"
#include "saturate/data/loader.h"
#include "saturate/distributed/data_parallel.h"
#include "saturate/models/model.h"
#include "saturate/report/train_report.h"
#include "saturate/tune/effective_batch.h"
#include "saturate/tune/plan.h"
#include "saturate/tune/tuner.h"

namespace saturate::cli {

namespace {
// Less than this cannot hold a model, a batch and an optimizer: a typo, not a plan.
constexpr int64_t kMinMemoryLimitBytes = int64_t{1} << 20;

// What to train and how the optimizer steps (the first block of every recipe command's help).
void add_run_flags(CLI::App& app, RecipeFlags& f, RecipeUse use) {
  TrainOptions& t = f.train;
  if (use != RecipeUse::kTune) {
    app.add_option("--config", f.config,
                   "use the configuration in a plan.json from `saturate tune`; flags given here "
                   "override it");
  }
  app.add_option("--model", f.model,
                 "fmnist-cnn, mlp, mlp-deep, resnet18-cifar, or a TorchScript file (PATH.pt)")
      ->capture_default_str();
  app.add_option("--data", f.data, kDataSpecHelp)->capture_default_str();
  app.add_option("--device", f.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--epochs", t.epochs, "passes over the training split")->capture_default_str();
  app.add_option("--steps", t.steps, "optimizer steps; overrides --epochs when > 0")
      ->capture_default_str();
  app.add_option("--batch-size", t.batch_size, "samples per optimizer step")
      ->capture_default_str();
  app.add_option("--lr", t.lr, "peak learning rate")->capture_default_str();
  app.add_option("--optimizer", f.optimizer, "sgd or adamw")->capture_default_str();
  app.add_option("--momentum", t.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", t.weight_decay, "weight decay")->capture_default_str();
  app.add_option("--clip-grad-norm", t.clip_grad_norm,
                 "clip the gradients' global L2 norm to this (after fp16 unscaling); 0 = off")
      ->capture_default_str();
  app.add_option("--schedule", f.schedule, "constant or cosine (after warm-up)")
      ->capture_default_str();
  app.add_option("--warmup-steps", t.warmup_steps, "linear LR warm-up steps; -1 = 2% of the run")
      ->capture_default_str();
}

// How each step runs: precision, layout, memory, threads, seed.
void add_step_flags(CLI::App& app, RecipeFlags& f, RecipeUse use) {
  TrainOptions& t = f.train;
  app.add_option("--precision", f.precision, "fp32, tf32 (CUDA), bf16, fp16 (CUDA) or auto")
      ->capture_default_str();
  app.add_option("--memory-format", f.memory_format,
                 use == RecipeUse::kTune
                     ? "layout of image activations to start from: contiguous (NCHW) or "
                       "channels-last (NHWC); tune measures the other one too"
                     : "layout of image activations and conv weights: contiguous (NCHW) or "
                       "channels-last (NHWC, often faster on CPUs and tensor cores; tune "
                       "measures it)")
      ->capture_default_str();
  app.add_option("--accumulate", t.accumulate,
                 "micro-batches per optimizer step (same effective --batch-size)")
      ->capture_default_str();
  app.add_option("--recompute-segments", t.recompute_segments,
                 "recompute activations in this many segments (0 = off)")
      ->capture_default_str();
  app.add_option("--memory-limit", f.memory_limit,
                 "cap device memory, e.g. 2GiB (CPU: a budget; CUDA: a smaller card)");
  app.add_option("--threads", f.threads, "LibTorch intra-op threads; 0 = usable cores")
      ->capture_default_str();
  app.add_option("--denormals", f.denormals,
                 "flush (tiny floats to zero: no slowdown as the loss nears 0) or keep (IEEE "
                 "gradual underflow)")
      ->capture_default_str();
  app.add_option("--seed", t.seed, "seed for weights and data order")->capture_default_str();
  if (use == RecipeUse::kTrain)
    app.add_flag("--adaptive-batch", t.adaptive_batch,
                 "grow the batch (doubling) and the learning rate (gain rule) as the "
                 "gradient noise scale grows, at the samples/s the plan measured by batch "
                 "(--config plan.json from tune --effective-batch auto) or, without one, at "
                 "what the run measures: each doubling is tried, then kept or undone; --steps "
                 "and --epochs count steps of the starting batch");
  app.add_flag("--no-noise-scale", f.no_noise_scale,
               "do not measure the gradient noise scale (measured by default wherever a step has "
               "two gradients at the same weights: --accumulate > 1 or data parallel)");
  app.add_option("--noise-scale-budget", t.noise_scale_budget,
                 "share of the step time measuring the noise scale may take on average: where "
                 "one measurement costs more (tiny steps), fewer steps are measured; 1 measures "
                 "every step")
      ->capture_default_str();
}

// The input pipeline, the validation split, and data parallelism.
void add_input_flags(CLI::App& app, RecipeFlags& f, RecipeUse use) {
  TrainOptions& t = f.train;
  app.add_option("--workers", f.workers,
                 "input-pipeline threads making batches ahead of training; 0 = in the training "
                 "thread")
      ->capture_default_str();
  app.add_option("--prefetch", f.prefetch, "batches made ahead (at least one per worker)")
      ->capture_default_str();
  app.add_option("--cache", f.cache, "keep up to SIZE of read samples in memory, e.g. 1GiB");
  app.add_option("--crop", f.crop,
                 "random SIZE x SIZE crop of each training sample (evaluation: the centre)");
  app.add_option("--pad", f.pad, "zero pixels added to each side before --crop");
  app.add_flag("--flip", f.flip, "random horizontal flips of training samples");
  app.add_option("--seq-len", f.seq_len,
                 "text data (--data text:PATH): tokens per training window (default 128)");
  app.add_option("--val-fraction", f.val_fraction,
                 use == RecipeUse::kTune
                     ? "share of the training data held out (seeded) to judge every change"
                     : "share of the training data held out (seeded) as a validation split; 0: "
                       "none")
      ->capture_default_str();
  app.add_option("--eval-batch-size", t.eval_batch_size, "samples per evaluation forward pass")
      ->capture_default_str();
  app.add_option("--eval-every", t.eval_every,
                 "evaluate the validation split every N steps as well as at the end; 0 = at "
                 "the end")
      ->capture_default_str();
  app.add_option("--backend", f.backend,
                 "data parallel (under torchrun or srun): auto (NCCL on CUDA, Gloo on CPU), "
                 "gloo or nccl")
      ->capture_default_str();
  if (use != RecipeUse::kTune)
    app.add_option("--ranks", f.ranks,
                   "data-parallel processes to start on this node (as saturate launch does); "
                   "default the plan's world size, else 1")
        ->capture_default_str();
  app.add_option("--dist-timeout", f.dist_timeout_s,
                 "data parallel: seconds to wait for the other ranks (rendezvous, "
                 "collectives)")
      ->capture_default_str();
}

}  // namespace

void add_recipe_flags(CLI::App& app, RecipeFlags& f, RecipeUse use) {
  add_run_flags(app, f, use);
  add_step_flags(app, f, use);
  add_input_flags(app, f, use);
}

namespace {

// --adaptive-batch with a plan: the plan's measured samples/s by batch, from the batch it
// trains with. A plan whose rule keeps the batch fixed, or one whose program owns its learning
// rate, cannot grow it.
void adaptive_batch_from_plan(const Plan& plan, RecipeFlags& f) {
  SATURATE_CHECK(!f.no_noise_scale, "train: --adaptive-batch follows the gradient noise scale; "
                 "it cannot run with --no-noise-scale");
  const EffectiveBatchOutcome rule = plan.effective_batch;
  SATURATE_CHECK(rule != EffectiveBatchOutcome::kKept && rule != EffectiveBatchOutcome::kBatchChanged,
                 "train: --adaptive-batch: the plan's effective batch is '", to_string(rule), "' (",
                 rule == EffectiveBatchOutcome::kKept
                     ? "your batch held fixed in micro-batches"
                     : "a program that owns its learning rate",
                 "), a fixed-batch rule the adaptive batch would break; drop --adaptive-batch or "
                 "tune with --effective-batch auto");
  std::string measured;
  bool on_curve = false;
  for (const GoodputPoint& p : plan.goodput.curve) {
    f.train.adaptive_curve.emplace_back(p.batch, p.samples_per_s);
    measured += (measured.empty() ? "" : ", ") + std::to_string(p.batch);
    on_curve = on_curve || p.batch == f.train.batch_size;
  }
  if (plan.goodput.curve.empty()) {
    SATURATE_LOG_INFO("train: --adaptive-batch: the plan has no goodput curve (samples/s by "
                      "batch), so the run measures its own, trying each doubling before keeping it");
    return;
  }
  SATURATE_CHECK(on_curve, "train: --adaptive-batch: batch ", f.train.batch_size,
                 " is not among the batches the plan measured (", measured, ")");
}

}  // namespace

// The recipe's pipeline flags, so `train --config` builds the pipeline the trials measured.
void describe_recipe(Plan& plan, const RecipeFlags& rf, const Recipe& recipe, int64_t val_samples) {
  plan.model = rf.model;
  plan.data = rf.data;
  plan.device = recipe.device.str();
  plan.memory_limit_bytes = recipe.memory_limit_bytes;
  plan.crop = rf.crop;
  plan.pad = rf.pad;
  plan.flip = rf.flip;
  plan.seq_len = rf.seq_len;
  plan.cache = rf.cache;
  plan.denormals = rf.denormals;
  plan.quality.val_fraction = rf.val_fraction;
  plan.quality.val_samples = val_samples;
}

void apply_plan(const Plan& plan, const CLI::App& app, RecipeFlags& f, int world) {
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  const TrainOptions& p = plan.config.train;
  TrainOptions& t = f.train;
  if (!plan.model.empty() && !given("--model")) f.model = plan.model;
  if (!plan.data.empty() && !given("--data")) f.data = plan.data;
  if (!plan.device.empty() && !given("--device")) f.device = plan.device;
  if (plan.memory_limit_bytes > 0 && !given("--memory-limit"))
    f.memory_limit = std::to_string(plan.memory_limit_bytes);
  if (!given("--precision")) f.precision = to_string(p.precision);
  if (!given("--recompute-segments")) t.recompute_segments = p.recompute_segments;
  if (!given("--memory-format")) f.memory_format = to_string(p.memory_format);
  if (!given("--warmup-steps")) t.warmup_steps = p.warmup_steps;
  if (!given("--optimizer")) f.optimizer = to_string(p.optimizer);
  if (!given("--schedule")) f.schedule = to_string(p.schedule);
  if (!given("--momentum")) t.momentum = p.momentum;
  if (!given("--weight-decay")) t.weight_decay = p.weight_decay;
  if (!given("--clip-grad-norm")) t.clip_grad_norm = p.clip_grad_norm;
  if (!given("--eval-batch-size")) t.eval_batch_size = p.eval_batch_size;
  if (!given("--eval-every")) t.eval_every = p.eval_every;
  if (!given("--threads")) f.threads = plan.config.threads;
  if (!given("--seed")) t.seed = p.seed;
  if (!given("--denormals")) f.denormals = plan.denormals;
  if (!given("--workers")) f.workers = plan.config.workers;
  if (!given("--prefetch")) f.prefetch = plan.config.prefetch;
  if (!given("--crop")) f.crop = plan.crop;
  if (!given("--pad")) f.pad = plan.pad;
  if (!given("--flip")) f.flip = plan.flip;
  if (!given("--seq-len")) f.seq_len = plan.seq_len;
  if (!given("--cache")) f.cache = plan.cache;
  if (!given("--val-fraction")) f.val_fraction = plan.quality.val_fraction;
  ReplayRequest req;
  req.world = world;
  req.batch_given = given("--batch-size");
  req.batch_size = t.batch_size;
  req.accumulate_given = given("--accumulate");
  req.accumulate = t.accumulate;
  req.lr_given = given("--lr");
  req.lr = t.lr;
  const BatchReplay r = replay_plan_batch(plan.config, plan.effective_batch, req);
  t.batch_size = r.batch_size;
  t.accumulate = r.accumulate;
  t.lr = r.lr;
  for (const std::string& line : r.info) SATURATE_LOG_INFO("train: ", line);
  for (const std::string& line : r.warn) SATURATE_LOG_WARN("train: ", line);
  if (t.adaptive_batch) adaptive_batch_from_plan(plan, f);
}

Recipe resolve_recipe(const RecipeFlags& f, const char* command) {
  Recipe r;
  r.train = f.train;
  r.train.optimizer = parse_optimizer(f.optimizer);
  r.train.schedule = parse_schedule(f.schedule);
  r.train.memory_format = parse_memory_format(f.memory_format);
  r.train.noise_scale = !f.no_noise_scale;
  const Precision requested = parse_precision(f.precision);
  if (!f.memory_limit.empty()) {
    r.memory_limit_bytes = parse_bytes(f.memory_limit, "--memory-limit");
    SATURATE_CHECK(r.memory_limit_bytes >= kMinMemoryLimitBytes, command, ": --memory-limit ",
                   f.memory_limit, " is below ", format_bytes(kMinMemoryLimitBytes),
                   ", too little for any model; give a size such as 2GiB");
  }
  SATURATE_CHECK(f.workers >= 0 && f.workers <= 256, command,
                 ": --workers must be in [0, 256], got ", f.workers);
  SATURATE_CHECK(f.prefetch >= 1 && f.prefetch <= 64, command,
                 ": --prefetch must be in [1, 64], got ", f.prefetch);
  r.input.data_spec = f.data;
  r.input.cache_bytes = f.cache.empty() ? 0 : parse_bytes(f.cache, "--cache");
  r.input.crop = f.crop;
  r.input.pad = f.pad;
  r.input.flip = f.flip;
  r.input.seq_len = f.seq_len;
  r.input.val_fraction = f.val_fraction;
  r.input.val_seed = f.train.seed;
  const DeviceSpec spec = DeviceSpec::parse(f.device);
  SATURATE_CHECK(f.denormals == "flush" || f.denormals == "keep", command,
                 ": --denormals must be flush or keep, got '", f.denormals, "'");
  // Before any thread starts: threads inherit the float mode of the thread that made them.
  r.denormals_flushed = configure_denormals(f.denormals == "flush");
  configure_host_allocator();
  // --threads 0: this node's cores shared by its ranks (each taking all of them would make
  // every rank's threads time-share cores).
  int threads = f.threads;
  if (threads == 0) {
    const DistEnv env = dist_env_from_environment();
    if (env.local_world_size > 1) {
      threads = std::max(1, usable_cores() / env.local_world_size);
      SATURATE_LOG_DEBUG(command, ": ", usable_cores(), " usable cores shared by ",
                         env.local_world_size, " ranks on this node: ", count_of(threads, "thread"), " each");
    }
  }
  r.threads = configure_threads(threads);
  r.probe = probe_devices();
  const DeviceChoice choice = select_device(spec, r.probe);
  r.device_spec = spec;
  r.device = choice.device;
  r.device_reason = choice.reason;
  const PrecisionChoice precision = resolve_precision(requested, r.device, r.probe);
  r.train.precision = precision.precision;
  if (requested == Precision::kAuto)
    SATURATE_LOG_INFO(command, ": --precision auto: ", precision.reason);
  if (precision.is_emulated) {
    // Measured on a 2-core AMD EPYC without AVX-512 (issue 14): fmnist-cnn at batch 64 ran 275
    // samples/s in bf16 and 1686 in fp32.
    SATURATE_LOG_WARN(command, ": --precision ", to_string(precision.precision), " on ",
                      r.probe.cpu.model.empty() ? std::string("this CPU") : r.probe.cpu.model,
                      ", which has no native bf16 (avx512_bf16/amx): it is emulated and usually "
                      "several times slower (6x measured on an AMD EPYC); --precision fp32 is "
                      "the faster choice here");
  }
  r.train.validate();
  return r;
}

TrainingInput open_recipe_input(const Recipe& r, const c10::Device& device) {
  const int cuda = device.is_cuda() ? (device.has_index() ? device.index() : 0) : -1;
  return open_training_input(r.input, cuda);
}

int ranks_to_launch(const RecipeFlags& f, const CLI::App& app, const Plan* plan,
                    const char* command) {
  const bool given = app.count("--ranks") > 0;
  SATURATE_CHECK(f.ranks >= 1, command, ": --ranks must be >= 1, got ", f.ranks);
  const DistEnv env = dist_env_from_environment();
  if (env.is_distributed()) {
    SATURATE_CHECK(!given || f.ranks == env.world_size, command, ": --ranks ", f.ranks,
                   ", but the launcher (", env.launcher, ") started ", env.world_size,
                   " ranks; leave --ranks out under a launcher");
    return 0;
  }
  const int wanted = given ? f.ranks : plan != nullptr ? plan->config.world_size : 1;
  if (wanted <= 1) return 0;
  SATURATE_LOG_INFO(command, ": ", wanted, " data-parallel ranks on this node (",
                    given ? "--ranks" : "the plan's world size", "), as saturate launch "
                    "--nproc-per-node ", wanted, " would start them");
  return wanted;
}

DataParallelRun join_data_parallel(const RecipeFlags& f, const Recipe& recipe,
                                   const char* command, int ranks_per_replica) {
  DataParallelRun run;
  run.env = dist_env_from_environment();
  run.device = recipe.device;
  const DistBackend backend = parse_dist_backend(f.backend);
  SATURATE_CHECK(std::isfinite(f.dist_timeout_s) && f.dist_timeout_s > 0, command,
                 ": --dist-timeout must be a positive number of seconds, got ", f.dist_timeout_s);
  if (!run.is_distributed()) return run;
  // One GPU per rank on its node (select_device gives cuda:0 for auto and "cuda": before,
  // every rank of a multi-GPU node landed there).
  const DeviceChoice mine = select_rank_device(recipe.device_spec, recipe.probe, run.env.local_rank,
                                               run.env.local_world_size);
  run.device = mine.device;
  run.group = init_process_group(
      run.env, backend, run.device,
      std::chrono::milliseconds(static_cast<int64_t>(f.dist_timeout_s * 1000)));
  if (ranks_per_replica > 1) {
    const int replicas = run.env.world_size / ranks_per_replica;
    SATURATE_LOG_INFO(command, ": model parallel, ", run.env.describe(), ", ",
                      to_string(run.group->backend()), "; ", ranks_per_replica, " ranks per replica × ",
                      count_of(replicas, "replica"), ", global batch ",
                      recipe.train.batch_size * replicas, " (", replicas, " × ",
                      recipe.train.batch_size, ")",
                      run.device.is_cuda() ? "; " + mine.reason : std::string());
    return run;
  }
  run.sync = make_data_parallel(*run.group);
  SATURATE_LOG_INFO(command, ": data parallel, ", run.env.describe(), ", ",
                    to_string(run.group->backend()), "; global batch ",
                    recipe.train.batch_size * run.env.world_size, " (", run.env.world_size,
                    " × ", recipe.train.batch_size, ")",
                    run.device.is_cuda() ? "; " + mine.reason : std::string());
  return run;
}

void throw_collective_failure(const DataParallelRun& run, const char* command,
                              const std::exception& e) {
  const std::string gone = run.group ? run.group->exited_peers() : std::string();
  throw std::runtime_error(std::string(command) + ": " + run.env.describe() +
                           ": a collective failed, " +
                           (gone.empty() ? "another rank has probably stopped"
                                         : gone + (gone.rfind("ranks", 0) == 0 ? " have" : " has") +
                                               " exited") +
                           " (" + first_line(e.what()) + ")");
}

LoaderOptions shard_for(const DataParallelRun& run, LoaderOptions loader, int ranks_per_replica) {
  const int n = std::max(1, ranks_per_replica);
  loader.rank = run.env.rank / n;
  loader.world = run.env.world_size / n;
  return loader;
}

void describe_train_run(TrainReport& r, const RecipeFlags& rf, const Recipe& recipe,
                        const DataParallelRun& dp, const TrainingInput& input,
                        const Loader& loader, const Model& model, int ranks_per_replica) {
  r.options = recipe.train;
  r.model = model.name();
  r.data = rf.data;
  r.device = dp.device.str();
  r.probe = recipe.probe;
  r.threads = recipe.threads;
  // A split model's replica spans several ranks: the report counts replicas.
  r.world_size = dp.env.world_size / std::max(1, ranks_per_replica);
  r.workers = rf.workers;
  r.prefetch = rf.prefetch;
  r.memory_limit_bytes = recipe.memory_limit_bytes;
  r.loader = loader.stats();
  r.val_samples = input.splits.validation.size();
  r.tokens_per_sample = input.tokens_per_sample();
  r.is_terminated = g_terminated.load();
}

}  // namespace saturate::cli
