// SPDX-License-Identifier: Apache-2.0
// saturate tune: the staged search for the fastest configuration that keeps quality, written
// as a plan that `saturate train --config` runs. Flags → TuneOptions → tune() (src/tune/) →
// the ranks stage through launched jobs → plan JSON and the console report.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <utility>

#include <CLI/CLI.hpp>

#include "command.h"
#include "exec_commands.h"
#include "recipe.h"
#include "tune_ranks.h"
#include "saturate/core/json.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/device/device_memory.h"
#include "saturate/diagnose/plan_facts.h"
#include "saturate/distributed/agreed_clock.h"
#include "saturate/report/context.h"
#include "saturate/report/plan_report.h"
#include "saturate/telemetry/console_progress.h"
#include "saturate/tune/plan.h"
#include "saturate/tune/torch_trial_runner.h"
#include "saturate/tune/tune_candidates.h"
#include "saturate/tune/tuner.h"

namespace saturate::cli {
namespace {

struct TuneFlags {
  RecipeFlags rf;
  TuneOptions o;
  std::string out_path = "plan.json", prefer = "faster", effective = "auto";
  int64_t quality_samples = -1;
  int max_ranks = 0;
  bool quiet = false;
};

void add_tune_flags(CLI::App& app, TuneFlags& f) {
  add_recipe_flags(app, f.rf, RecipeUse::kTune);
  TuneOptions& o = f.o;
  app.add_option("--reserve", o.search.reserve, "share of the memory limit kept free")
      ->capture_default_str();
  app.add_option("--max-batch", o.search.max_batch,
                 "largest batch size to consider (default: what the data, the memory and the "
                 "budget allow)");
  app.add_option("--prefer", f.prefer,
                 "faster: the fastest batch; smaller: the smallest within --tolerance of it")
      ->capture_default_str();
  app.add_option("--tolerance", o.search.tolerance, "for --prefer smaller")->capture_default_str();
  app.add_option("--effective-batch", f.effective,
                 "auto: keep your batch through accumulation when the batch shrinks, rescale the "
                 "LR when it grows; keep; rescale")
      ->capture_default_str();
  app.add_option("--quality-samples", f.quality_samples,
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
  app.add_option("--max-ranks", f.max_ranks,
                 "on CPU, the most processes the ranks stage tries against one: data-parallel "
                 "ranks up to the usable cores, and, when memory binds, a model split into "
                 "stages or shares up to this many even past them (1 skips it; default: the "
                 "usable cores)");
  app.add_option("--out", f.out_path, "where to write the plan")->capture_default_str();
  app.add_flag("-q,--quiet", f.quiet, "no live progress line (a terminal's stderr only)");
}

void check_tune_flags(TuneFlags& f) {
  TuneOptions& o = f.o;
  o.search.prefer = parse_prefer(f.prefer);
  o.effective_batch = parse_effective_batch(f.effective);
  SATURATE_CHECK(o.search.reserve >= 0 && o.search.reserve < 0.9,
                 "tune: --reserve must be in [0, 0.9), got ", o.search.reserve);
  SATURATE_CHECK(o.search.max_batch >= 1, "tune: --max-batch must be positive");
  SATURATE_CHECK(o.measure_steps >= 2, "tune: --measure-steps must be at least 2");
  SATURATE_CHECK(o.budget_s >= 0, "tune: --budget-s must not be negative");
  SATURATE_CHECK(f.max_ranks >= 0, "tune: --max-ranks must be >= 0, got ", f.max_ranks);
  SATURATE_CHECK(f.rf.val_fraction > 0 && f.rf.val_fraction < 0.5,
                 "tune: --val-fraction must be in (0, 0.5): the guard judges changes on "
                 "held-out training data, got ", f.rf.val_fraction);
}

void print_header(const TuneFlags& f, const Recipe& recipe, const DataParallelRun& dp,
                  const TrialRunner& runner, int64_t val_samples) {
  std::cout << "saturate tune: " << f.rf.model << " on " << f.rf.data << ", " << dp.device.str()
            << ", " << (dp.group ? std::to_string(dp.env.world_size) + " ranks × " : std::string())
            << count_of(recipe.threads, "thread") << ", memory " << format_bytes(runner.memory_limit_bytes())
            << " less " << format_fixed(100 * f.o.search.reserve, 0) << "% reserve, "
            << val_samples << " samples held out for validation";
  if (f.o.budget_s > 0) std::cout << ", budget " << format_duration_s(f.o.budget_s);
  std::cout << "\n";
}

// The user's configuration, as the recipe's flags give it.
RunConfig user_config(const Recipe& recipe, const RecipeFlags& rf) {
  RunConfig base;
  base.train = recipe.train;
  base.threads = recipe.threads;
  base.workers = rf.workers;
  base.prefetch = rf.prefetch;
  return base;
}

}  // namespace

int run_tune(const std::vector<std::string>& args) {
  if (wants_exec(args)) return run_tune_exec(args);
  TuneFlags f;
  f.rf.val_fraction = 0.05;
  f.o.budget_s = 300;
  f.o.search.max_batch = int64_t{1} << 40;  // the data, the memory model and the budget bound it
  CLI::App app{"Find the fastest configuration that fits in memory and keeps quality, and write "
               "it as a plan for `saturate train --config`.",
               "saturate tune"};
  add_tune_flags(app, f);
  if (!parse_args(app, args)) return 0;
  check_tune_flags(f);
  TuneOptions& o = f.o;
  // Under a launcher every rank tunes the same job and rank 0 reports and writes the plan.
  const bool reports = dist_env_from_environment().rank == 0;
  if (reports) check_writable(f.out_path, "--out");  // before any work
  f.rf.train.evaluate = false;
  const Recipe recipe = resolve_recipe(f.rf, "tune");
  DataParallelRun dp = join_data_parallel(f.rf, recipe, "tune");
  RunConfig base = user_config(recipe, f.rf);
  add_device_candidates(o, base, recipe.device, recipe.probe);
  o.stop = &g_interrupted;
  // The pipeline `train` builds for these flags: streamed folders, crops, cache, validation.
  const TrainingInput input = open_recipe_input(recipe, dp.device);
  const int64_t val_samples = input.splits.validation.size();
  // The guard's runs default to the recipe's run (--steps, else --epochs), bounded by the budget.
  o.quality_samples = f.quality_samples >= 0 ? f.quality_samples
                      : recipe.train.steps > 0 ? recipe.train.steps * recipe.train.batch_size
                                               : recipe.train.epochs * input.source->size();
  o.eval_samples = val_samples;
  o.tune_eval_batch = app.count("--eval-batch-size") == 0;  // a given one is only checked
  // Read before the memory limit is in force.
  const ModelLayoutFacts layout = model_layout_facts(f.rf.model, input, f.max_ranks);
  const int64_t memory_limit = tune_memory_limit(recipe, dp);
  o.model_splits = may_split(recipe, dp, layout, f.max_ranks, memory_limit);
  auto memory = make_device_memory(dp.device, memory_limit);
  TorchTrialRunner runner(f.rf.model, input, dp.device, *memory, o.search.max_batch);
  ConsoleProgress progress(std::cerr, /*is_tty=*/true, "tune", 200.0, /*transient=*/true);
  if (reports && !f.quiet && stderr_is_tty()) runner.set_progress(&progress);
  // Data parallel: trials are the job's (every rank its shard, gradients averaged), outcomes
  // agreed, and budget and Ctrl-C decided on rank 0's clock, so the ranks never part ways.
  std::atomic<bool> agreed_stop{false};
  if (dp.group) {
    runner.set_data_parallel(dp.group.get());
    base.world_size = dp.env.world_size;
    o.elapsed_s = agreed_elapsed_s(*dp.group, g_interrupted, agreed_stop);
    o.stop = &agreed_stop;
  }
  // The header waits for the first stage: a model that cannot run one step fails before any
  // output.
  bool header_printed = false;
  Plan plan = tune(runner, base, o, [&](const PlanStage& s) {
    if (!reports) return;
    if (!std::exchange(header_printed, true)) print_header(f, recipe, dp, runner, val_samples);
    print_plan_stage(std::cout, s);
    std::cout.flush();
  });
  if (!reports) return static_cast<int>(plan.interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
  describe_recipe(plan, f.rf, recipe, val_samples);
  // Processes × threads: measured through train itself, as the plan will run. Not when this
  // tune is itself one rank of a job (the launcher chose the processes).
  if (!plan.interrupted && !dist_env_from_environment().is_distributed())
    run_ranks_stage(plan, recipe, layout, f.max_ranks, o.budget_s, runner.memory_limit_bytes(),
                    o.quality_samples, o.quality_tolerance);
  check_some_layout_runs(plan, runner.memory_limit_bytes());
  RunFacts facts = environment_facts(
      recipe.probe, recipe.device,
      plan.config.threads * std::max(1, dp.group ? dp.env.local_world_size : plan.config.world_size),
      recipe.device.is_cpu() ? measure_gemm_gflops(512, 5) : -1.0);
  add_plan_facts(facts, plan, runner.memory_limit_bytes());
  const std::vector<Finding> findings = diagnose(facts);
  nlohmann::json plan_json = to_json(plan);
  plan_json["findings"] = findings_to_json(findings);
  plan_json["context"] = run_context(recipe.probe, recipe.device.str());
  write_json_file(f.out_path, plan_json);
  print_plan_result(std::cout, plan, f.out_path);
  print_findings(std::cout, findings);
  return static_cast<int>(plan.interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
}

}  // namespace saturate::cli
