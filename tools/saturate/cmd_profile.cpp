// SPDX-License-Identifier: Apache-2.0
// saturate profile: run N training steps of a config and show where each step's time goes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "command.h"
#include "recipe.h"
#include "saturate/data/loader.h"
#include "saturate/tune/plan.h"
#include "saturate/core/json.h"
#include "saturate/core/units.h"
#include "saturate/data/dataset.h"
#include "saturate/device/cpu_budget.h"
#include "saturate/device/device_memory.h"
#include "saturate/device/device_spec.h"
#include "saturate/device/probe.h"
#include "saturate/device/threads.h"
#include "saturate/models/model.h"
#include "saturate/report/context.h"
#include "saturate/telemetry/proc_stats.h"
#include "saturate/telemetry/sample_summary.h"
#include "saturate/telemetry/device_sampler.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/telemetry/throughput.h"
#include "saturate/core/log.h"
#include "saturate/train/oom_probe.h"
#include "saturate/train/trainer.h"

namespace saturate::cli {
namespace {

struct Phase {
  const char* name;
  double ms;
};

// --loader-only: `steps` batches through the pipeline and nothing else.
int profile_loader(Loader& loader, const std::string& data_spec, int64_t steps, int threads,
                   bool as_json) {
  const ProcStat cpu0 = read_proc_stat();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t samples = 0, batches = 0, epoch = 0;
  loader.start_epoch(epoch);
  while (batches < steps && !g_interrupted.load()) {
    std::optional<Batch> b = loader.next();
    if (!b) {
      loader.start_epoch(++epoch);
      continue;
    }
    samples += b->size;
    ++batches;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu_pct = cpu_util_between(cpu0, read_proc_stat()).util_pct;
  const LoaderStats st = loader.stats();
  const LoaderOptions& o = loader.options();
  const double sps = wall > 0 ? static_cast<double>(samples) / wall : 0.0;
  // Per-stage time per batch: making it (read, transform, collate; summed over workers) and the
  // consumer's wait for it.
  const double make_ms = batches ? 1000.0 * st.worker_busy_s / static_cast<double>(batches) : 0.0;
  const double wait_ms = batches ? 1000.0 * st.wait_s / static_cast<double>(batches) : 0.0;
  if (as_json) {
    nlohmann::json j;
    j["schema_version"] = 1;
    j["data"] = data_spec;
    j["batches"] = batches;
    j["batch_size"] = o.batch_size;
    j["workers"] = o.workers;
    j["prefetch"] = o.prefetch;
    j["samples_per_s"] = sps;
    j["cpu_util_pct"] = cpu_pct;
    j["make_batch_ms"] = make_ms;
    j["wait_ms"] = wait_ms;
    j["cache_hit_rate"] = st.cache_hit_rate();
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "saturate profile --loader-only: " << data_spec << ", batch " << o.batch_size
              << ", " << o.workers << " workers, prefetch " << o.prefetch << "\n"
              << "  samples/s     " << format_fixed(sps, 1) << " (" << batches << " batches in "
              << format_duration_s(wall) << ")\n"
              << "  cpu           " << format_fixed(cpu_pct, 0) << "% of all cores busy (" << threads
              << " intra-op threads)\n"
              << "  per batch     " << format_fixed(make_ms, 2) << " ms making it (read, transform, "
              << "collate), " << format_fixed(wait_ms, 2) << " ms waited for\n"
              << "  cache         " << format_fixed(100.0 * st.cache_hit_rate(), 1) << "% hits\n";
  }
  return static_cast<int>(g_interrupted.load() ? ExitCode::kInterrupted : ExitCode::kOk);
}

}  // namespace

int run_profile(const std::vector<std::string>& args) {
  RecipeFlags rf;
  rf.train.steps = 50;
  int64_t skip_steps = 5;
  std::string trace_path, logdir, summary_json;
  int64_t window_steps = 10;
  SamplerOptions sampler_options;
  sampler_options.interval_ms = 100;
  bool as_json = false;
  CLI::App app{"Run training steps of a config and show where each step's time goes.",
               "saturate profile"};
  add_recipe_flags(app, rf, RecipeUse::kProfile);
  app.add_option("--skip-steps", skip_steps, "first steps left out of the timing (warm-up)")
      ->capture_default_str();
  app.add_option("--window", window_steps, "steps per throughput window")->capture_default_str();
  app.add_option("--trace", trace_path, "write a Chrome/Perfetto trace to FILE");
  app.add_option("--logdir", logdir, "write TensorBoard scalars and steps.jsonl into DIR");
  app.add_option("--summary-json", summary_json, "also write the profile as JSON to FILE");
  app.add_option("--interval", sampler_options.interval_ms,
                 "device sampling interval in ms (CPU, RSS; GPUs through NVML)")
      ->capture_default_str();
  bool loader_only = false;
  app.add_flag("--loader-only", loader_only,
               "measure the input pipeline alone (no model): can it feed the device?");
  app.add_flag("--json", as_json, "print the profile as JSON");
  bool no_scaling = false;
  app.add_flag("--no-scaling", no_scaling,
               "data parallel: skip the one-process run (rank 0 alone, the same steps) that the "
               "scaling efficiency compares with");
  if (!parse_args(app, args)) return 0;
  std::optional<Plan> read;
  if (!rf.config.empty()) read = read_plan(rf.config);
  if (const int ranks = ranks_to_launch(rf, app, read ? &*read : nullptr, "profile"))
    return run_as_ranks(ranks, "profile", args);
  // Leaves --steps alone: a profile, not the plan's whole run.
  if (read) apply_plan(*read, app, rf, dist_env_from_environment().world_size);
  // --epochs alone profiles that many epochs (profile's 50 default steps would override them).
  if (app.count("--epochs") > 0 && app.count("--steps") == 0) rf.train.steps = 0;
  SATURATE_CHECK(rf.train.steps > 0 || app.count("--steps") == 0, "profile: --steps must be positive, got ",
                 rf.train.steps);
  SATURATE_CHECK(window_steps > 0, "profile: --window must be positive, got ", window_steps);
  SATURATE_CHECK(skip_steps >= 0, "profile: --skip-steps must not be negative, got ", skip_steps);
  if (!summary_json.empty()) check_writable(summary_json, "--summary-json");
  rf.train.evaluate = false;
  rf.train.timing_warmup_steps = skip_steps;
  const Recipe recipe = resolve_recipe(rf, "profile");
  TrainOptions opts = recipe.train;
  const int64_t memory_limit = recipe.memory_limit_bytes;
  const std::string& data_spec = rf.data;

  MultiSink sinks;
  MemorySink records;
  sinks.add(&records);
  FileSinks file_sinks(logdir, trace_path, sinks, dist_env_from_environment());

  const int threads = recipe.threads;
  const DeviceProbe& probe = recipe.probe;
  DataParallelRun dp = join_data_parallel(rf, recipe, "profile");
  TrainingInput input = open_recipe_input(recipe, dp.device);
  Loader loader(*input.source, shard_for(dp, input.loader_options(opts.batch_size, opts.seed,
                                                                   rf.workers, rf.prefetch)));
  const DatasetSplits& data = input.splits;
  if (loader_only) return profile_loader(loader, data_spec, opts.steps, threads, as_json);
  auto memory = make_device_memory(dp.device, memory_limit);
  seed_everything(opts.seed);
  auto model = make_model(rf.model, {input.sample_shape, input.num_classes});
  Trainer trainer(*model, opts, dp.device, memory.get(), dp.sync.get());
  DeviceSampler sampler(sampler_options);
  // Readings at both ends bracket the run, so even a run shorter than one interval has an
  // energy difference and a CPU utilisation.
  std::vector<DeviceSample> readings = {sampler.sample_now()};
  sampler.start();
  SampledSink sampled(sampler, sinks);  // readings go to --logdir's JSONL and TensorBoard too
  TrainSummary summary;
  try {
    summary = trainer.fit(loader, data, &sampled, &g_interrupted);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (!dp.is_distributed()) throw;
    throw_collective_failure(dp, "profile", e);
  }
  sampler.stop();
  file_sinks.finish(dp.group.get());
  for (const auto& d : sampler.samples()) readings.push_back(d);
  readings.push_back(sampler.sample_now());
  const SampleSummary device_samples = summarize_samples(readings, summary.samples);
  const ThroughputStats tp =
      steady_throughput(records.records(), opts.timing_warmup_steps, window_steps);

  const PhaseBreakdown& p = summary.phases;
  const Phase phases[] = {{"data_wait", p.data_wait_ms},        {"host_to_device", p.host_to_device_ms},
                          {"forward", p.forward_ms},            {"backward", p.backward_ms},
                          {"optimizer", p.optimizer_ms},        {"communication", p.communication_ms},
                          {"other", p.other_ms}};
  // Data parallel: ranks step in lockstep (the all-reduce waits for the slowest), so a slow
  // rank shows as the others' communication wait. Each rank's busy time per step (the step
  // less that wait) is what tells them apart; rank 0 gathers them all.
  const std::vector<double> mine = {p.step_ms, p.step_ms - p.communication_ms,
                                    p.communication_ms, p.data_wait_ms};
  const std::vector<std::vector<double>> per_rank =
      dp.group ? dp.group->allgather(mine) : std::vector<std::vector<double>>{mine};
  // Scaling efficiency: the job against world × one process of the same per-rank batch and
  // threads, measured here by rank 0 alone (the other ranks idle at a barrier) on the same steps.
  const double world = static_cast<double>(per_rank.size());
  const double job_sps = tp.samples_per_s * world;
  double alone_sps = 0;
  std::string alone_why;
  if (dp.group && !no_scaling && !summary.is_interrupted) {
    if (dp.env.rank == 0) {
      SATURATE_LOG_INFO("profile: scaling: rank 0 alone for ", opts.steps,
                        " steps while the other ranks wait");
      MemorySink alone;
      const ProbeResult r = probe_once(
          [&] {
            seed_everything(opts.seed);
            auto single = make_model(rf.model, {input.sample_shape, input.num_classes});
            Trainer t(*single, opts, dp.device, memory.get(), nullptr);
            Loader l(*input.source, input.loader_options(opts.batch_size, opts.seed, rf.workers,
                                                         rf.prefetch));
            t.fit(l, data, &alone, &g_interrupted);
          },
          *memory);
      if (r.outcome == ProbeOutcome::kFits)
        alone_sps = steady_throughput(alone.records(), opts.timing_warmup_steps, window_steps)
                        .samples_per_s;
      else
        alone_why = "out of memory beside the data-parallel run's state";
    }
    // The other ranks idle meanwhile, for about as long as the run they just made together:
    // not inside a collective bounded by --dist-timeout (a long profile failed there).
    const auto expected = std::chrono::seconds(120 + static_cast<int64_t>(10 * summary.train_wall_s));
    dp.group->wait_for_rank0("profile scaling run",
                             std::max(dp.group->timeout(), std::chrono::duration_cast<std::chrono::milliseconds>(expected)));
    dp.group->barrier();
  }
  if (dp.env.rank != 0) return static_cast<int>(ExitCode::kOk);  // rank 0 reports the job
  // Training FLOPs ≈ 3 × forward (backward computes gradients for inputs and weights).
  const double train_flops = 3.0 * static_cast<double>(model->forward_flops_per_sample());
  const double achieved_flops = train_flops * tp.samples_per_s;
  // The reference peak: on CPU the measured GEMM rate of this machine (what its BLAS can do),
  // in the precision the run's matmuls use: a bf16 run against the fp32 peak read as 86% of a
  // peak it never aimed at. The fp32 rate also feeds the slow-BLAS rule.
  const double peak_flops = recipe.device.is_cpu() ? measure_gemm_gflops(512, 5) * 1e9 : 0.0;
  const bool bf16_peak = opts.precision == Precision::kBf16 && recipe.device.is_cpu();
  const double mfu_peak_flops =
      bf16_peak ? measure_gemm_gflops(512, 5, c10::ScalarType::BFloat16) * 1e9 : peak_flops;
  const std::string mfu_peak_precision = bf16_peak ? "bf16" : "fp32";
  const double mfu_pct = mfu_peak_flops > 0 && train_flops > 0
                             ? 100.0 * achieved_flops / mfu_peak_flops
                             : std::nan("");
  const std::string device = recipe.device.str();

  // The node's ranks share its cores: the threads at work are every local rank's.
  RunFacts facts = environment_facts(probe, recipe.device, threads * dp.env.local_world_size,
                                     peak_flops > 0 ? peak_flops / 1e9 : -1.0);
  facts.steps = records.records();
  facts.warmup_steps = opts.timing_warmup_steps;
  facts.precision = to_string(opts.precision);
  facts.batch_size = opts.batch_size;
  facts.accumulate = opts.accumulate;
  facts.recompute_segments = opts.recompute_segments;
  facts.workers = rf.workers;
  if (memory_limit > 0) facts.memory_limit_bytes = memory_limit;
  facts.peak_memory_bytes = summary.peak_memory_bytes;
  facts.gpu_util_pct = device_samples.gpu_util_pct;
  facts.cpu_util_pct = device_samples.cpu_util_pct;
  facts.throttle_reasons = device_samples.throttle_reasons;
  if (per_rank.size() > 1) {
    for (const auto& r : per_rank) {
      facts.rank_step_ms.push_back(r[1]);
      facts.rank_communication_ms.push_back(r[2]);
    }
  }
  // What a page fault costs here prices the faults the steady steps took (allocation churn).
  const PageFaultCost fault_cost = measure_page_fault_cost();
  facts.page_fault_us = fault_cost.faults > 0 ? fault_cost.us_per_fault : -1.0;
  facts.cpu_cache = cpu_cache_enabled();
  const double faults_per_step =
      mean_page_faults(facts.steps, static_cast<size_t>(opts.timing_warmup_steps));
  const CpuBudgetStats cache = cpu_budget_stats();
  const std::vector<Finding> findings = diagnose(facts);

  if (as_json || !summary_json.empty()) {
    nlohmann::json j;
    j["schema_version"] = 1;
    j["model"] = model->name();
    j["data"] = data_spec;
    j["device"] = device;
    j["threads"] = threads;
    j["batch_size"] = opts.batch_size;
    j["precision"] = to_string(opts.precision);
    j["accumulate"] = opts.accumulate;
    j["steps"] = summary.steps;
    j["samples_per_s"] = tp.samples_per_s;
    j["samples_per_s_spread_pct"] = tp.spread_pct;
    j["windows"] = tp.windows;
    j["window_samples_per_s"] = tp.window_samples_per_s;
    j["step_ms"] = p.step_ms;
    for (const auto& ph : phases) j["phases_ms"][ph.name] = ph.ms;
    j["peak_memory_bytes"] = summary.peak_memory_bytes;
    j["train_flops_per_sample"] = train_flops;
    j["achieved_flops_per_s"] = achieved_flops;
    j["mfu_pct"] = std::isnan(mfu_pct) ? nlohmann::json() : nlohmann::json(mfu_pct);
    j["mfu_peak_gflops"] = mfu_peak_flops > 0 ? nlohmann::json(mfu_peak_flops / 1e9) : nlohmann::json();
    j["mfu_peak_precision"] = mfu_peak_precision;
    j["device_samples"] = {{"count", device_samples.count},
                           {"gpu_status", sampler.gpu_status()},
                           {"cpu_util_pct", device_samples.cpu_util_pct},
                           {"process_rss_peak_bytes", device_samples.process_rss_peak_bytes},
                           {"gpu_util_pct", device_samples.gpu_util_pct},
                           {"gpu_power_w", device_samples.gpu_power_w},
                           {"gpu_energy_j", device_samples.gpu_energy_j},
                           {"joules_per_sample", device_samples.joules_per_sample},
                           {"gpu_temperature_max_c", device_samples.gpu_temperature_max_c},
                           {"throttle_reasons", device_samples.throttle_reasons}};
    j["host_memory"] = {
        {"page_faults_per_step", faults_per_step >= 0 ? nlohmann::json(faults_per_step)
                                                      : nlohmann::json()},
        {"page_fault_us", fault_cost.faults > 0 ? nlohmann::json(fault_cost.us_per_fault)
                                                : nlohmann::json()},
        {"cpu_cache", facts.cpu_cache},
        {"cpu_cache_allocations", cache.num_allocations},
        {"cpu_system_allocations", cache.num_system_allocations},
        {"cpu_cached_bytes", cache.cached_bytes}};
    j["world_size"] = static_cast<int64_t>(per_rank.size());
    if (per_rank.size() > 1) {
      nlohmann::json ranks = nlohmann::json::array();
      for (size_t r = 0; r < per_rank.size(); ++r)
        ranks.push_back({{"rank", r}, {"step_ms", per_rank[r][0]}, {"busy_ms", per_rank[r][1]},
                         {"communication_ms", per_rank[r][2]}, {"data_wait_ms", per_rank[r][3]}});
      j["ranks"] = ranks;
      j["job_samples_per_s"] = job_sps;
      j["scaling"] = {{"one_process_samples_per_s", alone_sps > 0 ? nlohmann::json(alone_sps)
                                                                  : nlohmann::json()},
                      {"efficiency", alone_sps > 0 ? nlohmann::json(job_sps / (world * alone_sps))
                                                   : nlohmann::json()}};
    }
    j["findings"] = findings_to_json(findings);
    j["context"] = run_context(probe, device);
    j["workers"] = rf.workers;
    j["prefetch"] = rf.prefetch;
    j["optimizer"] = to_string(opts.optimizer);
    j["lr"] = opts.lr;
    if (as_json) std::cout << j.dump(2) << "\n";
    if (!summary_json.empty()) write_json_file(summary_json, j);
  }
  if (!as_json) {
    std::cout << "saturate profile: " << model->name() << " on " << data_spec << ", " << device
              << ", " << threads << " threads, batch " << opts.batch_size << ", "
              << to_string(opts.precision) << "\n";
    std::cout << "  samples/s     " << format_fixed(tp.samples_per_s, 1) << " (median of "
              << tp.windows << " windows of " << window_steps << " steps, spread "
              << format_fixed(tp.spread_pct, 1) << "%)\n";
    std::cout << "  step          " << format_fixed(p.step_ms, 2) << " ms\n";
    std::cout << "  phase                     ms   share\n";
    for (const auto& ph : phases) {
      if (std::string(ph.name) == "communication" && per_rank.size() == 1) continue;
      std::string name = ph.name;
      name.resize(16, ' ');
      std::string ms = format_fixed(ph.ms, 2);
      ms.insert(0, ms.size() < 8 ? 8 - ms.size() : 0, ' ');
      std::string share =
          format_fixed(p.step_ms > 0 ? 100.0 * ph.ms / p.step_ms : 0.0, 1) + "%";
      share.insert(0, share.size() < 7 ? 7 - share.size() : 0, ' ');
      std::cout << "    " << name << ms << " " << share << "\n";
    }
    if (per_rank.size() > 1) {
      // The slowest rank is the one that waits least: the others wait for it.
      double fastest = per_rank[0][1];
      for (const auto& r : per_rank) fastest = std::min(fastest, r[1]);
      std::cout << "  ranks (" << per_rank.size() << ", global batch "
                << opts.batch_size * static_cast<int64_t>(per_rank.size())
                << ")  busy ms   comm ms   data ms   vs fastest\n";
      for (size_t r = 0; r < per_rank.size(); ++r) {
        std::ostringstream row;
        row << "    rank " << r;
        std::string head = row.str();
        head.resize(20, ' ');
        auto col = [](double v) {
          std::string x = format_fixed(v, 2);
          x.insert(0, x.size() < 10 ? 10 - x.size() : 0, ' ');
          return x;
        };
        std::cout << head << col(per_rank[r][1]) << col(per_rank[r][2]) << col(per_rank[r][3])
                  << "   +" << format_fixed(100.0 * (per_rank[r][1] / fastest - 1.0), 1)
                  << "%\n";
      }
      std::cout << "  job           " << format_fixed(job_sps, 1) << " samples/s ("
                << per_rank.size() << " ranks × rank 0's)";
      if (alone_sps > 0)
        std::cout << "; one process alone " << format_fixed(alone_sps, 1)
                  << " samples/s: scaling efficiency "
                  << format_fixed(100.0 * job_sps / (world * alone_sps), 1) << "%";
      else if (!alone_why.empty())
        std::cout << "; one process alone: " << alone_why;
      std::cout << "\n";
    }
    if (train_flops > 0) {
      std::cout << "  compute       " << format_fixed(train_flops / 1e6, 1)
                << " MFLOP/sample (3x forward), " << format_fixed(achieved_flops / 1e9, 1)
                << " GFLOP/s";
      if (!std::isnan(mfu_pct))
        std::cout << ", " << format_fixed(mfu_pct, 1) << "% of the measured " << mfu_peak_precision
                  << " GEMM peak (" << format_fixed(mfu_peak_flops / 1e9, 1) << " GFLOP/s)";
      std::cout << "\n";
    }
    if (summary.peak_memory_bytes > 0)
      std::cout << "  peak memory   " << format_bytes(summary.peak_memory_bytes) << "\n";
    if (faults_per_step >= 0) {
      std::cout << "  page faults   " << format_fixed(faults_per_step, 0) << " per step";
      if (fault_cost.faults > 0)
        std::cout << " (~" << format_fixed(faults_per_step * fault_cost.us_per_fault / 1000.0, 2)
                  << " ms at " << format_fixed(fault_cost.us_per_fault, 2) << " us each)";
      std::cout << "; cpu cache "
                << (facts.cpu_cache ? "on: " + std::to_string(cache.num_allocations -
                                                              cache.num_system_allocations) +
                                          " of " + std::to_string(cache.num_allocations) +
                                          " allocations reused"
                                    : std::string("off (SATURATE_CPU_CACHE)"))
                << "\n";
    }
    std::cout << "  cpu           " << format_fixed(device_samples.cpu_util_pct, 0)
              << "% busy (mean of " << device_samples.count << " samples), process RSS peak "
              << format_bytes(device_samples.process_rss_peak_bytes) << "\n";
    std::cout << "  gpu           ";
    if (device_samples.gpu_util_pct >= 0) {
      std::cout << format_fixed(device_samples.gpu_util_pct, 0) << "% busy";
      if (device_samples.gpu_power_w >= 0)
        std::cout << ", " << format_fixed(device_samples.gpu_power_w, 0) << " W";
      if (device_samples.joules_per_sample >= 0)
        std::cout << ", " << format_fixed(device_samples.joules_per_sample, 3) << " J/sample";
      for (const auto& t : device_samples.throttle_reasons) std::cout << ", throttled: " << t;
      std::cout << "\n";
    } else {
      std::cout << sampler.gpu_status() << "\n";
    }
    print_findings(std::cout, findings);
  }
  return static_cast<int>(summary.is_interrupted ? ExitCode::kInterrupted : ExitCode::kOk);
}

}  // namespace saturate::cli
