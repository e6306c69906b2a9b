// SPDX-License-Identifier: Apache-2.0
// saturate tune: the staged search for the fastest configuration that keeps quality, written
// as a plan that `saturate train --config` runs.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include <CLI/CLI.hpp>

#include "command.h"
#include "recipe.h"
#include "tune_ranks.h"
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
#include "saturate/telemetry/step_record.h"
#include "saturate/tune/plan.h"
#include "saturate/tune/ranks_stage.h"
#include "saturate/tune/torch_trial_runner.h"
#include "saturate/tune/tuner.h"

namespace saturate::cli {
namespace {

// The reduced precisions this device runs, besides the baseline's.
std::vector<Precision> precision_candidates(const c10::Device& device, const DeviceProbe& probe,
                                            Precision base) {
  std::vector<Precision> out;
  for (Precision p : {Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    if (p == base) continue;
    try {
      out.push_back(resolve_precision(p, device, probe).precision);
    } catch (const Error&) {
      // not supported here; resolve_precision says why when asked directly
    }
  }
  return out;
}

void print_stage(std::ostream& out, const PlanStage& s) {
  std::string name = s.name;
  name.resize(std::max<size_t>(name.size() + 1, 15), ' ');  // "input_pipeline " is the longest
  out << "  " << name;
  if (s.before_samples_per_s > 0) {
    out << format_fixed(s.before_samples_per_s, 1) << " → " << format_fixed(s.after_samples_per_s, 1)
        << " samples/s" << (s.changed ? " (changed)" : "");
  } else if (s.after_samples_per_s > 0) {
    out << format_fixed(s.after_samples_per_s, 1) << " samples/s";
  }
  out << "\n      " << s.why << "\n";
}

// What still holds the tuned configuration back, from its measured step breakdown.
std::vector<Finding> plan_findings(const Plan& plan, const Recipe& recipe, int64_t limit_bytes,
                                   int local_ranks) {
  // The node's ranks share its cores: the threads at work are every local rank's.
  RunFacts facts = environment_facts(recipe.probe, recipe.device,
                                     plan.config.threads * std::max(1, local_ranks),
                                     recipe.device.is_cpu() ? measure_gemm_gflops(512, 5) : -1.0);
  StepRecord tuned_step;
  const PhaseBreakdown& ph = plan.tuned.phases;
  tuned_step.data_wait_ms = ph.data_wait_ms;
  tuned_step.host_to_device_ms = ph.host_to_device_ms;
  tuned_step.forward_ms = ph.forward_ms;
  tuned_step.backward_ms = ph.backward_ms;
  tuned_step.optimizer_ms = ph.optimizer_ms;
  tuned_step.communication_ms = ph.communication_ms;
  tuned_step.other_ms = ph.other_ms;
  tuned_step.step_ms = ph.step_ms;
  facts.steps = {tuned_step};
  // The precision stage measured what the hardware flags only suggest: a reduced precision
  // that ran slower here is not "much faster" (a CPU may have avx512_bf16 and still lose).
  double fp32_sps = 0, bf16_sps = 0, fp16_sps = 0;
  for (const PlanTrial& t : plan.trials) {
    if ((t.stage != "precision" && t.stage != "baseline") || !t.fits) continue;
    const Precision p = t.config.train.precision;
    double& slot = p == Precision::kBf16 ? bf16_sps : p == Precision::kFp16 ? fp16_sps : fp32_sps;
    slot = std::max(slot, t.samples_per_s);
  }
  if (fp32_sps > 0 && bf16_sps > 0 && bf16_sps <= fp32_sps) facts.bf16_fast = false;
  if (fp32_sps > 0 && fp16_sps > 0 && fp16_sps <= fp32_sps) facts.fp16_fast = false;
  facts.precision = to_string(plan.config.train.precision);
  facts.batch_size = plan.config.train.batch_size;
  facts.accumulate = plan.config.train.accumulate;
  facts.recompute_segments = plan.config.train.recompute_segments;
  facts.workers = plan.config.workers;
  facts.memory_limit_bytes = limit_bytes;
  facts.peak_memory_bytes = plan.tuned.peak_memory_bytes;
  return diagnose(facts);
}

void print_result(std::ostream& out, const Plan& plan, const std::string& out_path) {
  const double gain = plan.baseline.samples_per_s > 0
                          ? plan.tuned.samples_per_s / plan.baseline.samples_per_s
                          : 0.0;
  out << "plan" << (plan.interrupted ? " (interrupted: partial)" : "") << ": "
      << plan.config.describe() << ", lr " << format_fixed(plan.config.train.lr, 6) << "\n  "
      << format_fixed(plan.baseline.samples_per_s, 1) << " → "
      << format_fixed(plan.tuned.samples_per_s, 1) << " samples/s";
  if (gain > 0) out << " (" << format_fixed(gain, 2) << "×)";
  out << ", peak " << format_bytes(plan.tuned.peak_memory_bytes) << "; quality "
      << to_string(plan.quality.status) << "; " << plan.probe_steps << " trial steps in "
      << format_duration_s(plan.tune_wall_s);
  if (plan.budget_s > 0) out << " (budget " << format_duration_s(plan.budget_s) << ")";
  out << "\n  written to " << out_path << "; run it with: saturate train --config " << out_path
      << "\n";
}

}  // namespace

int run_tune(const std::vector<std::string>& args) {
  RecipeFlags rf;
  rf.val_fraction = 0.05;
  std::string out_path = "plan.json", prefer_text = "faster", effective_text = "auto";
  int64_t quality_samples = -1;
  TuneOptions o;
  o.budget_s = 300;
  o.search.max_batch = int64_t{1} << 40;  // the data, the memory model and the budget bound it
  CLI::App app{"Find the fastest configuration that fits in memory and keeps quality, and write "
               "it as a plan for `saturate train --config`.",
               "saturate tune"};
  add_recipe_flags(app, rf, RecipeUse::kTune);
  app.add_option("--reserve", o.search.reserve, "share of the memory limit kept free")
      ->capture_default_str();
  app.add_option("--max-batch", o.search.max_batch,
                 "largest batch size to consider (default: what the data, the memory and the "
                 "budget allow)");
  app.add_option("--prefer", prefer_text,
                 "faster: the fastest batch; smaller: the smallest within --tolerance of it")
      ->capture_default_str();
  app.add_option("--tolerance", o.search.tolerance, "for --prefer smaller")->capture_default_str();
  app.add_option("--effective-batch", effective_text,
                 "auto: keep your batch through accumulation when the batch shrinks, rescale the "
                 "LR when it grows; keep; rescale")
      ->capture_default_str();
  app.add_option("--quality-samples", quality_samples,
                 "training samples per quality-guard run (default: the recipe's --steps or "
                 "--epochs, or what the budget affords; 0 skips the guard)");
  app.add_option("--quality-tolerance", o.quality_tolerance,
                 "largest accepted drop in validation accuracy (absolute, 0.01 = 1 point); "
                 "never tighter than twice the measured seed-to-seed noise")
      ->capture_default_str();
  app.add_option("--measure-steps", o.measure_steps, "steps per measurement (first untimed)")
      ->capture_default_str();
  app.add_option("--budget-s", o.budget_s,
                 "wall-time budget of the whole tune in seconds, guard included (0 = none)")
      ->capture_default_str();
  int max_ranks = 0;
  app.add_option("--max-ranks", max_ranks,
                 "on CPU, the most data-parallel processes the ranks stage tries against one "
                 "(1 skips it; default: the usable cores)");
  app.add_option("--out", out_path, "where to write the plan")->capture_default_str();
  if (!parse_args(app, args)) return 0;

  o.search.prefer = parse_prefer(prefer_text);
  o.effective_batch = parse_effective_batch(effective_text);
  SATURATE_CHECK(o.search.reserve >= 0 && o.search.reserve < 0.9,
                 "tune: --reserve must be in [0, 0.9), got ", o.search.reserve);
  SATURATE_CHECK(o.search.max_batch >= 1, "tune: --max-batch must be positive");
  SATURATE_CHECK(o.measure_steps >= 2, "tune: --measure-steps must be at least 2");
  SATURATE_CHECK(o.budget_s >= 0, "tune: --budget-s must not be negative");
  SATURATE_CHECK(rf.val_fraction > 0 && rf.val_fraction < 0.5,
                 "tune: --val-fraction must be in (0, 0.5): the guard judges changes on "
                 "held-out training data, got ", rf.val_fraction);
  // Under a launcher every rank tunes the same job and rank 0 reports and writes the plan.
  const bool reports = dist_env_from_environment().rank == 0;
  if (reports) check_writable(out_path, "--out");  // before any work
  rf.train.evaluate = false;
  const Recipe recipe = resolve_recipe(rf, "tune");
  DataParallelRun dp = join_data_parallel(rf, recipe, "tune");
  RunConfig base;
  base.train = recipe.train;
  base.threads = recipe.threads;
  base.workers = rf.workers;
  base.prefetch = rf.prefetch;
  o.precisions = precision_candidates(recipe.device, recipe.probe, base.train.precision);
  // Image models may run faster in the other layout; which one depends on model and hardware.
  o.memory_formats = {base.train.memory_format == MemoryFormat::kContiguous
                          ? MemoryFormat::kChannelsLast
                          : MemoryFormat::kContiguous};
  if (recipe.device.is_cpu() && recipe.threads > 1)
    o.threads = {recipe.threads, recipe.threads / 2};
  o.max_workers = std::max(1, recipe.probe.cpu.cores_usable);
  o.stop = &g_interrupted;
  // The pipeline `train` builds for these flags: streamed folders, crops, cache, validation.
  const TrainingInput input = open_recipe_input(recipe, dp.device);
  const int64_t train_samples = input.source->size();
  // The guard's runs default to the recipe's run (--steps, else --epochs), bounded by the budget.
  const int64_t recipe_samples = recipe.train.steps > 0
                                     ? recipe.train.steps * recipe.train.batch_size
                                     : recipe.train.epochs * train_samples;
  o.quality_samples = quality_samples >= 0 ? quality_samples : recipe_samples;
  o.eval_samples = input.splits.validation.size();
  o.tune_eval_batch = app.count("--eval-batch-size") == 0;  // a given one is only checked
  // After the data is loaded: the budget is for training, not the dataset.
  // The ranks of a CPU node share its memory: without a --memory-limit each plans for its share.
  int64_t memory_limit = recipe.memory_limit_bytes;
  if (dp.group && dp.device.is_cpu() && memory_limit == 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0)
      memory_limit = static_cast<int64_t>(pages) * page / std::max(1, dp.env.local_world_size);
  }
  auto memory = make_device_memory(dp.device, memory_limit);
  TorchTrialRunner runner(rf.model, input, dp.device, *memory, o.search.max_batch);
  // Data parallel: trials are the job's (every rank its shard, gradients averaged), outcomes
  // agreed, and budget and Ctrl-C decided on rank 0's clock, so the ranks never part ways.
  std::atomic<bool> agreed_stop{false};
  if (dp.group) {
    runner.set_data_parallel(dp.group.get());
    base.world_size = dp.env.world_size;
    const auto start = std::chrono::steady_clock::now();
    DistGroup* group = dp.group.get();
    o.elapsed_s = [group, start, &agreed_stop] {
      const double mine =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const auto all = group->allgather({mine, g_interrupted.load() ? 1.0 : 0.0});
      for (const auto& r : all) agreed_stop = agreed_stop || r[1] != 0;
      return all[0][0];
    };
    o.stop = &agreed_stop;
  }

  // The header waits for the first stage: a model that cannot run one step fails before any
  // output.
  bool header_printed = false;
  Plan plan = tune(runner, base, o, [&](const PlanStage& s) {
    if (!reports) return;
    if (!header_printed) {
      std::cout << "saturate tune: " << rf.model << " on " << rf.data << ", "
                << dp.device.str() << ", "
                << (dp.group ? std::to_string(dp.env.world_size) + " ranks × " : std::string())
                << recipe.threads << " threads, memory "
                << format_bytes(runner.memory_limit_bytes()) << " less "
                << format_fixed(100 * o.search.reserve, 0) << "% reserve, "
                << input.splits.validation.size() << " samples held out for validation";
      if (o.budget_s > 0) std::cout << ", budget " << format_duration_s(o.budget_s);
      std::cout << "\n";
      header_printed = true;
    }
    print_stage(std::cout, s);
    std::cout.flush();
  });
  if (!reports) return static_cast<int>(plan.interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
  plan.model = rf.model;
  plan.data = rf.data;
  plan.device = recipe.device.str();
  plan.memory_limit_bytes = recipe.memory_limit_bytes;
  plan.crop = rf.crop;
  plan.pad = rf.pad;
  plan.flip = rf.flip;
  plan.cache = rf.cache;
  plan.denormals = rf.denormals;
  plan.quality.val_fraction = rf.val_fraction;
  plan.quality.val_samples = input.splits.validation.size();
  // Processes × threads: measured through train itself, as the plan will run. Not when this
  // tune is itself one rank of a job (the launcher chose the processes).
  SATURATE_CHECK(max_ranks >= 0, "tune: --max-ranks must be >= 0, got ", max_ranks);
  if (!plan.interrupted && !dist_env_from_environment().is_distributed()) {
    RanksStageOptions ri;
    ri.on_cpu = recipe.device.is_cpu();
    ri.cores = usable_cores();
    ri.max_ranks = max_ranks > 0 ? max_ranks : ri.cores;
    {
      auto m = make_model(rf.model, {input.sample_shape, input.num_classes});
      ri.model_has_buffers = m->state_tensors().size() > m->parameters().size();
    }
    ri.budget_left_s = o.budget_s > 0 ? std::max(0.0, o.budget_s - plan.tune_wall_s) : -1.0;
    ri.stop = &g_interrupted;
    // Every process of a candidate on this host shares the memory the trials planned for.
    ri.memory_limit_bytes = runner.memory_limit_bytes();
    ri.reserve = plan.reserve;
    const auto t0 = std::chrono::steady_clock::now();
    const size_t stages = plan.stages.size();
    LaunchJobRunner jobs(plan);
    tune_ranks(plan, ri, jobs);
    if (plan.stages.size() > stages) print_stage(std::cout, plan.stages.back());
    plan.tune_wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const std::vector<Finding> findings =
      plan_findings(plan, recipe, runner.memory_limit_bytes(),
                    dp.group ? dp.env.local_world_size : plan.config.world_size);
  nlohmann::json plan_json = to_json(plan);
  plan_json["findings"] = findings_to_json(findings);
  plan_json["context"] = run_context(recipe.probe, recipe.device.str());
  write_json_file(out_path, plan_json);
  print_result(std::cout, plan, out_path);
  print_findings(std::cout, findings);
  return static_cast<int>(plan.interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
}

}  // namespace saturate::cli
