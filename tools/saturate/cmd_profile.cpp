// SPDX-License-Identifier: Apache-2.0
// saturate profile: flags → ProfileOptions, the library runs the steps and measures
// (tune/profile.h), diagnose reads the findings, and this file picks the output.
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "command.h"
#include "exec_commands.h"
#include "recipe.h"
#include "saturate/core/json.h"
#include "saturate/data/loader.h"
#include "saturate/diagnose/run_facts.h"
#include "saturate/report/profile_report.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/tune/plan.h"
#include "saturate/tune/profile.h"

namespace saturate::cli {
namespace {

struct ProfileFlags {
  RecipeFlags recipe;
  int64_t skip_steps = 5;
  int64_t window_steps = 10;
  std::string trace_path, logdir, summary_json;
  double interval_ms = 100;
  bool loader_only = false;
  bool as_json = false;
  bool no_scaling = false;
};

void add_profile_flags(CLI::App& app, ProfileFlags& f) {
  f.recipe.train.steps = 50;
  add_recipe_flags(app, f.recipe, RecipeUse::kProfile);
  app.add_option("--skip-steps", f.skip_steps, "first steps left out of the timing (warm-up)")
      ->capture_default_str();
  app.add_option("--window", f.window_steps, "steps per throughput window")->capture_default_str();
  app.add_option("--trace", f.trace_path, "write a Chrome/Perfetto trace to FILE");
  app.add_option("--logdir", f.logdir, "write TensorBoard scalars and steps.jsonl into DIR");
  app.add_option("--summary-json", f.summary_json, "also write the profile as JSON to FILE");
  app.add_option("--interval", f.interval_ms,
                 "device sampling interval in ms (CPU, RSS; GPUs through NVML)")
      ->capture_default_str();
  app.add_flag("--loader-only", f.loader_only,
               "measure the input pipeline alone (no model): can it feed the device?");
  app.add_flag("--json", f.as_json, "print the profile as JSON");
  app.add_flag("--no-scaling", f.no_scaling,
               "data parallel: skip the one-process run (rank 0 alone, the same steps) that the "
               "scaling efficiency compares with");
}

// The flags after a plan's: what the options cannot say by themselves is checked here.
void check_profile_flags(const CLI::App& app, ProfileFlags& f) {
  RecipeFlags& rf = f.recipe;
  // --epochs alone profiles that many epochs (profile's 50 default steps would override them).
  if (app.count("--epochs") > 0 && app.count("--steps") == 0) rf.train.steps = 0;
  SATURATE_CHECK(rf.train.steps > 0 || app.count("--steps") == 0,
                 "profile: --steps must be positive, got ", rf.train.steps);
  SATURATE_CHECK(f.window_steps > 0, "profile: --window must be positive, got ", f.window_steps);
  SATURATE_CHECK(f.skip_steps >= 0, "profile: --skip-steps must not be negative, got ",
                 f.skip_steps);
  if (!f.summary_json.empty()) check_writable(f.summary_json, "--summary-json");
  rf.train.evaluate = false;
  rf.train.timing_warmup_steps = f.skip_steps;
}

ProfileOptions profile_options(const ProfileFlags& f, const Recipe& recipe) {
  ProfileOptions o;
  o.train = recipe.train;
  o.model = f.recipe.model;
  o.data_spec = f.recipe.data;
  o.threads = recipe.threads;
  o.workers = f.recipe.workers;
  o.prefetch = f.recipe.prefetch;
  o.memory_limit_bytes = recipe.memory_limit_bytes;
  o.window_steps = f.window_steps;
  o.sampler.interval_ms = f.interval_ms;
  o.measure_scaling = !f.no_scaling;
  return o;
}

int exit_code(bool is_interrupted) {
  return static_cast<int>(is_interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
}

int report_loader_only(Loader& loader, const ProfileFlags& f, const Recipe& recipe) {
  const LoaderProfile p = run_loader_profile(loader, recipe.train.steps, f.recipe.data,
                                             recipe.threads, &g_interrupted);
  if (f.as_json)
    std::cout << loader_profile_to_json(p).dump(2) << "\n";
  else
    write_loader_profile_table(std::cout, p);
  return exit_code(p.is_interrupted);
}

void report(const Profile& p, const ProfileFlags& f) {
  const std::vector<Finding> findings = diagnose(profile_facts(p));
  if (f.as_json || !f.summary_json.empty()) {
    const nlohmann::json j = profile_to_json(p, findings);
    if (f.as_json) std::cout << j.dump(2) << "\n";
    if (!f.summary_json.empty()) write_json_file(f.summary_json, j);
  }
  if (!f.as_json) write_profile_table(std::cout, p, findings);
}

}  // namespace

int run_profile(const std::vector<std::string>& args) {
  if (wants_exec(args)) return run_profile_exec(args);
  ProfileFlags f;
  CLI::App app{"Run training steps of a config and show where each step's time goes.",
               "saturate profile"};
  add_profile_flags(app, f);
  if (!parse_args(app, args)) return 0;
  RecipeFlags& rf = f.recipe;
  std::optional<Plan> read;
  if (!rf.config.empty()) read = read_plan(rf.config);
  if (const int ranks = ranks_to_launch(rf, app, read ? &*read : nullptr, "profile"))
    return run_as_ranks(ranks, "profile", args);
  // Leaves --steps alone: a profile, not the plan's whole run.
  if (read) apply_plan(*read, app, rf, dist_env_from_environment().world_size);
  check_profile_flags(app, f);
  const Recipe recipe = resolve_recipe(rf, "profile");

  MultiSink sinks;  // --logdir and --trace
  FileSinks file_sinks(f.logdir, f.trace_path, sinks, dist_env_from_environment());
  DataParallelRun dp = join_data_parallel(rf, recipe, "profile");
  TrainingInput input = open_recipe_input(recipe, dp.device);
  Loader loader(*input.source, shard_for(dp, input.loader_options(recipe.train.batch_size,
                                                                   recipe.train.seed, rf.workers,
                                                                   rf.prefetch)));
  if (f.loader_only) return report_loader_only(loader, f, recipe);

  ProfileJob job(input, loader, dp.device, recipe.probe);
  job.dist = dp.env;
  job.group = dp.group.get();
  job.sync = dp.sync.get();
  job.sink = &sinks;
  job.after_run = [&] { file_sinks.finish(dp.group.get()); };
  job.on_collective_failure = [&](const std::exception& e) {
    throw_collective_failure(dp, "profile", e);
  };
  job.stop = &g_interrupted;
  const Profile p = run_profile_job(profile_options(f, recipe), job);
  if (dp.env.rank != 0) return static_cast<int>(ExitCode::kOk);  // rank 0 reports the job
  report(p, f);
  return exit_code(p.is_interrupted);
}

}  // namespace saturate::cli
