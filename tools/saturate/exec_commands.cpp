// SPDX-License-Identifier: Apache-2.0
// The --exec commands: flags → a command and ExecRunnerOptions → run_exec_profile or tune()
// over an ExecTrialRunner (src/tune/) → the same reports as a built-in model's.
#include "exec_commands.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "command.h"
#include "saturate/core/json.h"
#include "saturate/core/program_path.h"
#include "saturate/core/strings.h"
#include "saturate/core/temp_folder.h"
#include "saturate/core/units.h"
#include "saturate/diagnose/plan_facts.h"
#include "saturate/diagnose/run_facts.h"
#include "saturate/distributed/dist_env.h"
#include "saturate/report/context.h"
#include "saturate/report/plan_report.h"
#include "saturate/report/profile_report.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/tune/exec_profile.h"
#include "saturate/tune/plan.h"
#include "saturate/tune/tune_candidates.h"
#include "saturate/train/precision.h"
#include "saturate/tune/tuner.h"

namespace saturate::cli {
namespace {

// What both --exec commands take: the program's first settings, the mapping, the limits.
struct ExecFlags {
  bool exec = false;
  std::vector<std::string> maps;
  int64_t batch_size = 0, grad_accum = 0, seed = -1;
  int workers = -1, prefetch = 0;
  std::string precision, metrics = "file", memory_limit, runs_dir;
  bool no_hook = false;
  double startup_timeout = 300, step_timeout = 120, run_timeout = 0;
};

void add_exec_flags(CLI::App& app, ExecFlags& f) {
  app.add_flag("--exec", f.exec, "run your own program (the words after --) under the exec "
                                 "protocol (docs/exec-protocol.md)");
  app.add_option("--map", f.maps, "NAME=FLAG: pass a setting as the program's own flag, e.g. "
                                  "batch_size=--per-device-batch-size (repeatable)");
  app.add_option("--batch-size", f.batch_size, "micro-batch per device of the first run "
                                               "(default: the program's own)");
  app.add_option("--grad-accum", f.grad_accum, "micro-batches per step of the first run");
  app.add_option("--precision", f.precision, "fp32, tf32, bf16 or fp16 for the first run");
  app.add_option("--workers", f.workers, "input worker processes of the first run");
  app.add_option("--prefetch", f.prefetch, "batches prepared ahead in the first run");
  app.add_option("--seed", f.seed, "the program's seed");
  app.add_option("--metrics", f.metrics, "file: SATURATE_METRICS; stdout: ':::SATURATE ' lines")
      ->capture_default_str();
  app.add_flag("--no-hook", f.no_hook, "do not put the zero-change hook and saturate_client on "
                                       "PYTHONPATH");
  app.add_option("--startup-timeout", f.startup_timeout, "seconds a run may take to its first "
                                                         "step")->capture_default_str();
  app.add_option("--step-timeout", f.step_timeout, "seconds without a step before a run is "
                                                   "stopped (no progress)")->capture_default_str();
  app.add_option("--run-timeout", f.run_timeout, "seconds a run may take in all (0: no limit)")
      ->capture_default_str();
  app.add_option("--memory-limit", f.memory_limit,
                 "cap the program's memory, e.g. 4GiB: on a GPU its CUDA allocator (through "
                 "saturate_client), else its processes' resident memory (cgroup v2 or a watchdog)");
  app.add_option("--runs-dir", f.runs_dir, "keep each run's folder (logs, metrics) in DIR");
}

// The settings the user gave for the first run, by the protocol's names.
ExecSettings given_settings(const CLI::App& app, const ExecFlags& f) {
  ExecSettings s;
  if (app.count("--batch-size")) s["batch_size"] = std::to_string(f.batch_size);
  if (app.count("--grad-accum")) s["grad_accum"] = std::to_string(f.grad_accum);
  if (app.count("--precision")) s["precision"] = to_string(parse_precision(f.precision));
  if (app.count("--workers")) s["num_workers"] = std::to_string(f.workers);
  if (app.count("--prefetch")) s["prefetch"] = std::to_string(f.prefetch);
  if (app.count("--seed")) s["seed"] = std::to_string(f.seed);
  return s;
}

void check_exec_flags(const CLI::App& app, const ExecFlags& f) {
  SATURATE_CHECK(!app.count("--batch-size") || f.batch_size >= 1, "exec: --batch-size must be "
                 ">= 1, got ", f.batch_size);
  SATURATE_CHECK(!app.count("--grad-accum") || f.grad_accum >= 1, "exec: --grad-accum must be "
                 ">= 1, got ", f.grad_accum);
  SATURATE_CHECK(!app.count("--workers") || f.workers >= 0, "exec: --workers must be >= 0");
  SATURATE_CHECK(!app.count("--prefetch") || f.prefetch >= 1, "exec: --prefetch must be >= 1");
  SATURATE_CHECK(!app.count("--seed") || f.seed >= 0, "exec: --seed must be >= 0");
  SATURATE_CHECK(f.metrics == "file" || f.metrics == "stdout", "exec: --metrics must be file or "
                 "stdout, got '", f.metrics, "'");
  SATURATE_CHECK(f.startup_timeout > 0 && f.step_timeout > 0 && f.run_timeout >= 0,
                 "exec: --startup-timeout and --step-timeout must be positive, --run-timeout "
                 "not negative");
}

// saturate_client's folder (the zero-change hook is in it): SATURATE_CLIENT_DIR, else the
// source tree this saturate was built from.
std::string client_dir() {
  const char* env = std::getenv("SATURATE_CLIENT_DIR");
  return env != nullptr && *env != '\0' ? env : SATURATE_CLIENT_SOURCE_DIR;
}

ExecCommand make_command(const std::vector<std::string>& words, const ExecFlags& f) {
  ExecCommand c;
  c.argv = words;
  for (const std::string& m : f.maps) c.maps.push_back(parse_exec_map(m));
  c.metrics_on_stdout = f.metrics == "stdout";
  const std::string client = client_dir();
  struct stat st {};
  if (!f.no_hook && ::stat((client + "/saturate_client/autohook").c_str(), &st) == 0)
    c.autohook_dir = client + "/saturate_client/autohook:" + client;
  return c;
}

// The argument lists before and after `--`; no command after it is a usage error.
std::pair<std::vector<std::string>, std::vector<std::string>> split_command(
    const std::vector<std::string>& args, const char* command) {
  const auto dash = std::find(args.begin(), args.end(), "--");
  std::vector<std::string> words = dash == args.end() ? std::vector<std::string>{}
                                                      : std::vector<std::string>(dash + 1, args.end());
  SATURATE_CHECK(!words.empty(), command, " --exec: no command after '--' (usage: saturate ",
                 command, " --exec [FLAGS] -- python train.py ...)");
  return {std::vector<std::string>(args.begin(), dash), words};
}

// Where the runs' folders go: --runs-dir (kept), else a temporary folder.
struct RunsFolder {
  std::unique_ptr<TempFolder> temp;
  std::string path;
};
RunsFolder runs_folder(const std::string& given) {
  RunsFolder r;
  if (given.empty()) {
    r.temp = std::make_unique<TempFolder>("saturate-exec", "exec");
    r.path = r.temp->path();
  } else {
    make_folders(given, "exec: --runs-dir");
    r.path = given;
  }
  return r;
}

ExecRunnerOptions runner_options(const CLI::App& app, const ExecFlags& f, ExecCommand command,
                                 const std::string& work_dir) {
  ExecRunnerOptions o;
  o.command = std::move(command);
  o.work_dir = work_dir;
  o.keep_runs = !f.runs_dir.empty();
  o.startup_limit_s = f.startup_timeout;
  o.no_progress_s = f.step_timeout;
  o.wall_limit_s = f.run_timeout;
  if (app.count("--memory-limit")) o.memory_limit_bytes = parse_bytes(f.memory_limit, "--memory-limit");
  o.stop = &g_interrupted;
  return o;
}

}  // namespace

bool wants_exec(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--") return false;
    if (a == "--exec") return true;
  }
  return false;
}

namespace {

struct ProfileExecFlags {
  ExecFlags exec;
  int64_t steps = 50, skip_steps = 5, window_steps = 10;
  std::string trace_path, logdir, summary_json;
  double interval_ms = 100;
  bool as_json = false;
};

void add_profile_exec_flags(CLI::App& app, ProfileExecFlags& f) {
  add_exec_flags(app, f.exec);
  app.add_option("--steps", f.steps, "steps to run (0: the program's whole run)")
      ->capture_default_str();
  app.add_option("--skip-steps", f.skip_steps, "first steps left out of the timing (warm-up)")
      ->capture_default_str();
  app.add_option("--window", f.window_steps, "steps per throughput window")->capture_default_str();
  app.add_option("--trace", f.trace_path, "write a Chrome/Perfetto trace to FILE");
  app.add_option("--logdir", f.logdir, "write TensorBoard scalars and steps.jsonl into DIR");
  app.add_option("--summary-json", f.summary_json, "also write the profile as JSON to FILE");
  app.add_option("--interval", f.interval_ms, "device sampling interval in ms")
      ->capture_default_str();
  app.add_flag("--json", f.as_json, "print the profile as JSON");
}

nlohmann::json exec_json(const ExecProfile& ep) {
  nlohmann::json processes = nlohmann::json::array();
  for (const ExecProcessUse& u : ep.run.processes)
    processes.push_back({{"pid", u.pid}, {"name", u.name}, {"cpu_s", u.cpu_s},
                         {"peak_rss_bytes", u.peak_rss_bytes},
                         {"peak_gpu_memory_bytes", u.peak_gpu_memory_bytes}});
  nlohmann::json evals = nlohmann::json::array();
  for (const ExecEval& e : ep.run.evals)
    evals.push_back({{"step", e.step}, {"name", e.name}, {"value", e.value},
                     {"higher_is_better", e.higher_is_better}});
  return {{"command", ep.command_line},
          {"mode", ep.mode},
          {"applied", ep.applied},
          {"ignored", ep.ignored},
          {"processes", processes},
          {"evals", evals},
          {"process_group_peak_rss_bytes", ep.run.peak_rss_bytes},
          {"process_group_peak_gpu_memory_bytes", ep.run.peak_gpu_memory_bytes},
          {"memory_limit", ep.run.memory_limit_how},
          {"warnings", ep.run.warnings},
          {"wall_s", ep.run.wall_s},
          {"stopped", to_string(ep.run.stopped)}};
}

}  // namespace

int run_profile_exec(const std::vector<std::string>& args) {
  const auto [flags, words] = split_command(args, "profile");
  ProfileExecFlags f;
  CLI::App app{"Run your own training program and show where each step's time goes.",
               "saturate profile --exec"};
  add_profile_exec_flags(app, f);
  if (!parse_args(app, flags)) return 0;
  check_exec_flags(app, f.exec);
  SATURATE_CHECK(f.steps >= 0 && f.skip_steps >= 0 && f.window_steps > 0, "profile: --steps and "
                 "--skip-steps must not be negative, --window must be positive");
  if (!f.summary_json.empty()) check_writable(f.summary_json, "--summary-json");
  const RunsFolder runs = runs_folder(f.exec.runs_dir);
  ExecProfileOptions o;
  o.runner = runner_options(app, f.exec, make_command(words, f.exec), runs.path);
  const DeviceProbe probe = probe_devices();
  o.runner.device_memory_limit = !probe.gpus.empty();
  o.settings = given_settings(app, f.exec);
  std::set<std::string> set_in_every_run = {"max_steps"};
  for (const auto& [name, value] : o.settings) set_in_every_run.insert(name);
  check_exec_command(o.runner.command, set_in_every_run);
  o.steps = f.steps;
  o.skip_steps = f.skip_steps;
  o.window_steps = f.window_steps;
  o.sampler.interval_ms = f.interval_ms;
  MultiSink sinks;
  FileSinks file_sinks(f.logdir, f.trace_path, sinks, DistEnv{});
  o.sink = &sinks;
  const ExecProfile ep = run_exec_profile(o, probe);
  file_sinks.finish(nullptr);
  const std::vector<Finding> findings = diagnose(profile_facts(ep.profile));
  if (f.as_json || !f.summary_json.empty()) {
    nlohmann::json j = profile_to_json(ep.profile, findings);
    j["exec"] = exec_json(ep);
    if (f.as_json) std::cout << j.dump(2) << "\n";
    if (!f.summary_json.empty()) write_json_file(f.summary_json, j);
  }
  if (!f.as_json) write_profile_table(std::cout, ep.profile, findings);
  return static_cast<int>(ep.profile.is_interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
}

namespace {

struct TuneExecFlags {
  ExecFlags exec;
  TuneOptions o;
  std::string out_path = "plan.json", effective = "grow";
  int64_t quality_samples = -1;
};

void add_tune_exec_flags(CLI::App& app, TuneExecFlags& f) {
  add_exec_flags(app, f.exec);
  TuneOptions& o = f.o;
  app.add_option("--reserve", o.search.reserve, "share of the memory limit kept free")
      ->capture_default_str();
  app.add_option("--max-batch", o.search.max_batch, "largest micro-batch to consider")
      ->capture_default_str();
  app.add_option("--effective-batch", f.effective,
                 "grow: take a faster larger batch (the program keeps its own LR; the quality "
                 "guard judges); keep: never change the samples per step")
      ->capture_default_str();
  app.add_option("--quality-samples", f.quality_samples,
                 "training samples per quality-guard run (default: what the budget affords, "
                 "or 200 steps of your batch without one; 0 skips the guard)");
  app.add_option("--quality-tolerance", o.quality_tolerance,
                 "largest accepted drop of the program's evaluation metric (its own units)")
      ->capture_default_str();
  app.add_option("--measure-steps", o.measure_steps, "steps per measurement (first untimed)")
      ->capture_default_str();
  app.add_option("--budget-s", o.budget_s, "wall-time budget of the whole tune in seconds")
      ->capture_default_str();
  app.add_option("--out", f.out_path, "where to write the plan")->capture_default_str();
}

// An integer the program's start line says it applied, else the given one, else `fallback`.
int64_t applied_int(const ExecStart* start, const ExecSettings& given, const char* name,
                    int64_t fallback) {
  if (start != nullptr && start->applied.contains(name) &&
      start->applied[name].is_number_integer())
    return start->applied[name].get<int64_t>();
  const auto it = given.find(name);
  return it != given.end() ? std::stoll(it->second) : fallback;
}

// The user's configuration: what the program ran with in its first run.
RunConfig base_config(const ExecRun& first, const ExecSettings& given) {
  const ExecStart* start = first.starts.empty() ? nullptr : &first.starts.front();
  RunConfig base;
  base.train.lr = 0;  // the program's own, which saturate neither knows nor sets
  const int64_t accum = std::max<int64_t>(1, applied_int(start, given, "grad_accum", 1));
  const int64_t per_step = first.steps.empty() ? 1 : first.steps.front().samples;
  const int64_t micro = applied_int(start, given, "batch_size", std::max<int64_t>(1, per_step / accum));
  base.train.batch_size = micro * accum;
  base.train.accumulate = accum;
  base.workers = static_cast<int>(applied_int(start, given, "num_workers", 0));
  base.prefetch = static_cast<int>(applied_int(start, given, "prefetch", 2));
  base.train.seed = static_cast<uint64_t>(applied_int(start, given, "seed", 0));
  std::string precision = given.count("precision") ? given.at("precision") : "fp32";
  if (start != nullptr && start->applied.contains("precision") &&
      start->applied["precision"].is_string())
    precision = start->applied["precision"].get<std::string>();
  base.train.precision = parse_precision(precision);
  return base;
}

// The stages that apply: only the settings the program applies can be tuned.
void exec_tune_options(TuneOptions& o, const RunConfig& base, const std::set<std::string>& applied,
                       const c10::Device& device, const DeviceProbe& probe) {
  const TuneOptions flags = o;
  add_device_candidates(o, base, device, probe);
  o.memory_formats.clear();
  o.threads.clear();
  if (applied.count("precision") == 0) o.precisions.clear();
  if (applied.count("num_workers") == 0) o.max_workers = 0;
  o.max_recompute_segments = 1;  // the protocol has no recomputation setting
  o.tune_eval_batch = false;
  o.eval_batch_stage = false;  // the program evaluates by itself
  o.search = flags.search;
  o.stop = &g_interrupted;
}

// The plan's program part: the command, the tuned settings, how the program did by itself.
PlanExec plan_exec(const ExecTrialRunner& runner, const Plan& plan, const ExecRun& first,
                   const std::set<std::string>& applied, double first_samples_per_s) {
  const ExecCommand& c = runner.options().command;
  PlanExec e;
  e.command = c.argv;
  e.maps = c.maps;
  e.metrics_on_stdout = c.metrics_on_stdout;
  const ExecSettings tuned = runner.settings_for(plan.config, 0);
  e.settings = {tuned.begin(), tuned.end()};
  e.applied = {applied.begin(), applied.end()};
  e.reproduce = exec_reproduce_line(c, tuned);
  if (!first.starts.empty())
    for (const auto& [name, value] : first.starts.front().applied.items())
      e.defaults[name] = value.is_string() ? value.get<std::string>() : value.dump();
  e.defaults_samples_per_s = first_samples_per_s;
  e.runs = runner.runs();
  return e;
}

void print_exec_header(const TuneExecFlags& f, const ExecTrialRunner& runner,
                       const std::set<std::string>& applied, const RunConfig& base, double sps) {
  std::cout << "saturate tune --exec: " << join(runner.options().command.argv, " ") << "\n"
            << "  as given: " << base.describe() << ", " << format_fixed(sps, 1)
            << " samples/s; the program applies: "
            << (applied.empty() ? "none" : join({applied.begin(), applied.end()}, ", "))
            << "; memory " << format_bytes(runner.memory_limit_bytes()) << " less "
            << format_fixed(100 * f.o.search.reserve, 0) << "% reserve";
  if (f.o.budget_s > 0) std::cout << ", budget " << format_duration_s(f.o.budget_s);
  std::cout << "\n";
}

}  // namespace

int run_tune_exec(const std::vector<std::string>& args) {
  const auto [flags, words] = split_command(args, "tune");
  TuneExecFlags f;
  f.o.budget_s = 300;
  f.o.search.max_batch = 4096;
  CLI::App app{"Tune your own training program: the fastest settings it accepts that keep its "
               "quality, written as a plan.", "saturate tune --exec"};
  add_tune_exec_flags(app, f);
  if (!parse_args(app, flags)) return 0;
  check_exec_flags(app, f.exec);
  SATURATE_CHECK(f.effective == "grow" || f.effective == "keep", "tune --exec: "
                 "--effective-batch must be grow or keep (the program owns its learning rate), "
                 "got '", f.effective, "'");
  SATURATE_CHECK(f.o.measure_steps >= 2 && f.o.budget_s >= 0 && f.o.search.max_batch >= 1,
                 "tune: --measure-steps must be at least 2, --max-batch positive, --budget-s "
                 "not negative");
  check_writable(f.out_path, "--out");
  const DeviceProbe probe = probe_devices();
  const c10::Device device = probe.gpus.empty() ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, 0);
  const RunsFolder runs = runs_folder(f.exec.runs_dir);
  ExecRunnerOptions ro = runner_options(app, f.exec, make_command(words, f.exec), runs.path);
  ro.pin_memory = device.is_cuda();
  ro.device_memory_limit = device.is_cuda();
  std::set<std::string> always = {"batch_size", "grad_accum", "precision", "num_workers",
                                  "prefetch", "seed", "max_steps"};
  if (ro.pin_memory) always.insert("pin_memory");
  ExecSettings given = given_settings(app, f.exec);
  check_exec_command(ro.command, always);
  for (const std::string& name : exec_placeholders(ro.command))
    SATURATE_CHECK(given.count(name) > 0, "tune --exec: the command's {", name, "} needs a value "
                   "for the program's first run, as you run it: give it with its flag");
  ExecTrialRunner runner(ro);
  given["max_steps"] = std::to_string(f.o.measure_steps);
  const ExecRun first = runner.run_as_given(given, "as given");
  const ExecStart* start = first.starts.empty() ? nullptr : &first.starts.front();
  if (start != nullptr) runner.set_world_size(start->world_size);
  const std::set<std::string> applied = exec_applied(ro.command, given, start);
  SATURATE_CHECK(applied.count("batch_size") > 0, "tune --exec: the program does not apply "
                 "batch_size (", start ? "its start line leaves it out" : "no start line",
                 "); read SATURATE_BATCH_SIZE in it, or pass it as its own flag with --map "
                 "batch_size=FLAG or {batch_size}");
  const double first_sps = measure_exec_steps(first.steps, 1, ro.world_size).samples_per_s;
  const RunConfig base = base_config(first, given);
  exec_tune_options(f.o, base, applied, device, probe);
  f.o.effective_batch = parse_effective_batch(f.effective);
  // By default the guard's runs are as long as the budget affords (at least 8 steps of the
  // largest batch); the program's own run length is not known.
  f.o.quality_samples = f.quality_samples >= 0 ? f.quality_samples
                        : f.o.budget_s > 0       ? int64_t{1} << 40
                                                 : 200 * base.train.batch_size;
  print_exec_header(f, runner, applied, base, first_sps);
  Plan plan = tune(runner, base, f.o, [](const PlanStage& s) {
    print_plan_stage(std::cout, s);
    std::cout.flush();
  });
  plan.model = words.size() > 1 ? words[1] : words[0];
  plan.data = "the program's own";
  plan.device = device.str();
  plan.memory_limit_bytes = ro.memory_limit_bytes;
  plan.exec = plan_exec(runner, plan, first, applied, first_sps);
  RunFacts facts = environment_facts(probe, device, probe.cpu.cores_usable, -1.0);
  add_plan_facts(facts, plan, runner.memory_limit_bytes());
  facts.phases_split = false;
  const std::vector<Finding> findings = diagnose(facts);
  nlohmann::json plan_json = to_json(plan);
  plan_json["findings"] = findings_to_json(findings);
  plan_json["context"] = run_context(probe, device.str());
  write_json_file(f.out_path, plan_json);
  print_plan_result(std::cout, plan, f.out_path);
  std::cout << "  the program with its own settings: " << format_fixed(first_sps, 1)
            << " samples/s; " << runner.runs() << " runs of it\n"
            << "  reproduce: " << plan.exec.reproduce << "\n";
  print_findings(std::cout, findings);
  return static_cast<int>(plan.interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
}

int run_exec_plan(const Plan& plan, int64_t steps) {
  ExecCommand c;
  c.argv = plan.exec.command;
  c.maps = plan.exec.maps;
  ExecSettings settings(plan.exec.settings.begin(), plan.exec.settings.end());
  if (steps > 0) settings["max_steps"] = std::to_string(steps);
  std::vector<std::string> argv = exec_argv(c, settings);
  for (const auto& [name, value] : exec_standalone_environment(settings))
    ::setenv(name.c_str(), value.c_str(), 1);
  // A cooperative script may import saturate_client without installing it.
  const char* old = std::getenv("PYTHONPATH");
  const std::string path = client_dir() + (old != nullptr && *old ? std::string(":") + old : "");
  ::setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<std::string> quoted;
  for (const std::string& w : argv) quoted.push_back(shell_quote(w));
  std::cerr << "saturate train: running the plan's program: " << join(quoted, " ") << "\n";
  std::cerr.flush();
  const std::string program = resolve_program(argv.at(0), "train");
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  ::execv(program.c_str(), cargv.data());
  SATURATE_CHECK_RUN(false, "train: cannot run ", program, ": ", std::strerror(errno));
  return 1;
}

}  // namespace saturate::cli
