// SPDX-License-Identifier: Apache-2.0
// The JSON reporter of a Profile (the declarations are in profile_report.h).
#include <cmath>

#include "report/profile_phases.h"
#include "saturate/report/context.h"
#include "saturate/report/profile_report.h"
#include "saturate/report/train_report.h"

namespace saturate {
namespace {

using json = nlohmann::json;

json positive_or_null(double v) { return v > 0 ? json(v) : json(); }

json device_samples_json(const Profile& p) {
  const SampleSummary& d = p.device_samples;
  return {{"count", d.count},
          {"gpu_status", p.gpu_status},
          {"cpu_util_pct", d.cpu_util_pct},
          {"process_rss_peak_bytes", d.process_rss_peak_bytes},
          {"gpu_util_pct", d.gpu_util_pct},
          {"gpu_power_w", d.gpu_power_w},
          {"gpu_energy_j", d.gpu_energy_j},
          {"joules_per_sample", d.joules_per_sample},
          {"gpu_temperature_max_c", d.gpu_temperature_max_c},
          {"throttle_reasons", d.throttle_reasons}};
}

json host_memory_json(const Profile& p) {
  const CpuBudgetStats& cache = p.cpu_cache_stats;
  const bool cost_known = p.page_fault_cost.faults > 0;
  return {{"page_faults_per_step",
           p.page_faults_per_step >= 0 ? json(p.page_faults_per_step) : json()},
          {"page_fault_us", cost_known ? json(p.page_fault_cost.us_per_fault) : json()},
          {"cpu_cache", p.cpu_cache},
          {"cpu_cache_allocations", cache.num_allocations},
          {"cpu_system_allocations", cache.num_system_allocations},
          {"cpu_cached_bytes", cache.cached_bytes}};
}

// Data parallel: every rank's times, the job's samples/s and the scaling efficiency.
void add_ranks(const Profile& p, json& j) {
  json ranks = json::array();
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const RankTimes& t = p.ranks[r];
    ranks.push_back({{"rank", r}, {"step_ms", t.step_ms}, {"busy_ms", t.busy_ms},
                     {"communication_ms", t.communication_ms}, {"data_wait_ms", t.data_wait_ms}});
  }
  j["ranks"] = ranks;
  j["job_samples_per_s"] = p.job_samples_per_s();
  const bool alone = p.one_process_samples_per_s > 0;
  j["scaling"] = {{"one_process_samples_per_s", positive_or_null(p.one_process_samples_per_s)},
                  {"efficiency", alone ? json(p.scaling_efficiency()) : json()}};
}

}  // namespace

json profile_to_json(const Profile& p, const std::vector<Finding>& findings) {
  json j;
  j["schema_version"] = 1;
  j["model"] = p.model;
  j["data"] = p.data;
  j["device"] = p.device.str();
  j["threads"] = p.threads;
  j["batch_size"] = p.train.batch_size;
  j["precision"] = to_string(p.train.precision);
  j["accumulate"] = p.train.accumulate;
  j["steps"] = p.steps;
  j["samples_per_s"] = p.throughput.samples_per_s;
  j["samples_per_s_spread_pct"] = p.throughput.spread_pct;
  j["windows"] = p.throughput.windows;
  j["window_samples_per_s"] = p.throughput.window_samples_per_s;
  j["step_ms"] = p.phases.step_ms;
  for (const auto& ph : detail::named_phases(p.phases)) j["phases_ms"][ph.name] = ph.ms;
  j["peak_memory_bytes"] = p.peak_memory_bytes;
  j["gns"] = noise_scale_to_json(p.noise);
  if (p.noise_precond.steps > 0) j["gns"]["preconditioned"] = noise_scale_to_json(p.noise_precond);
  j["train_flops_per_sample"] = p.train_flops_per_sample;
  if (p.tokens_per_sample > 0) {
    j["tokens_per_sample"] = p.tokens_per_sample;
    j["tokens_per_s"] = p.throughput.samples_per_s * static_cast<double>(p.tokens_per_sample);
    j["train_flops_per_token"] = p.train_flops_per_sample / static_cast<double>(p.tokens_per_sample);
  }
  if (!p.attention_kernel.empty()) j["attention_kernel"] = p.attention_kernel;
  j["achieved_flops_per_s"] = p.achieved_flops_per_s;
  j["mfu_pct"] = std::isnan(p.mfu_pct) ? json() : json(p.mfu_pct);
  j["mfu_peak_gflops"] = positive_or_null(p.mfu_peak_flops / 1e9);
  j["mfu_peak_precision"] = p.mfu_peak_precision;
  j["device_samples"] = device_samples_json(p);
  j["host_memory"] = host_memory_json(p);
  j["world_size"] = p.world_size();
  if (p.ranks.size() > 1) add_ranks(p, j);
  j["findings"] = findings_to_json(findings);
  j["context"] = run_context(p.probe, p.device.str());
  j["workers"] = p.workers;
  j["prefetch"] = p.prefetch;
  j["optimizer"] = to_string(p.train.optimizer);
  j["lr"] = p.train.lr;
  return j;
}

json loader_profile_to_json(const LoaderProfile& p) {
  json j;
  j["schema_version"] = 1;
  j["data"] = p.data;
  j["batches"] = p.batches;
  j["batch_size"] = p.batch_size;
  j["workers"] = p.workers;
  j["prefetch"] = p.prefetch;
  j["samples_per_s"] = p.samples_per_s;
  j["cpu_util_pct"] = p.cpu_util_pct;
  j["make_batch_ms"] = p.make_batch_ms;
  j["wait_ms"] = p.wait_ms;
  j["cache_hit_rate"] = p.cache_hit_rate;
  return j;
}

}  // namespace saturate
