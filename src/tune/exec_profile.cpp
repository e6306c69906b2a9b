// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/exec_profile.h"

#include <algorithm>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/train/precision.h"
#include "saturate/core/units.h"
#include "saturate/telemetry/sample_summary.h"
#include "saturate/telemetry/throughput.h"

namespace saturate {
namespace {

// The settings the program says it runs with, as the profile's configuration.
void describe_settings(Profile& p, const ExecStart* start) {
  if (start == nullptr) return;
  const nlohmann::json& a = start->applied;
  auto number = [&](const char* name, int64_t fallback) {
    return a.contains(name) && a[name].is_number_integer() ? a[name].get<int64_t>() : fallback;
  };
  p.train.accumulate = number("grad_accum", 1);
  p.train.batch_size = number("batch_size", 0) * std::max<int64_t>(1, p.train.accumulate);
  p.workers = static_cast<int>(number("num_workers", 0));
  p.prefetch = static_cast<int>(number("prefetch", p.prefetch));
  if (a.contains("precision") && a["precision"].is_string()) {
    try {
      p.train.precision = parse_precision(a["precision"].get<std::string>());
    } catch (const Error&) {
      // a name saturate does not know: the profile keeps fp32 and the start line says it
    }
  }
}

// One line per process of the group: its name, CPU cores used and peak resident memory.
std::string process_line(const ExecProcessUse& u, double wall_s) {
  return u.name + " (pid " + std::to_string(u.pid) + "): " +
         format_fixed(wall_s > 0 ? u.cpu_s / wall_s : 0, 2) + " cores, peak RSS " +
         format_bytes(u.peak_rss_bytes) +
         (u.peak_gpu_memory_bytes >= 0 ? ", GPU " + format_bytes(u.peak_gpu_memory_bytes) : "");
}

void fill_profile(ExecProfile& ep, const ExecProfileOptions& o, const DeviceProbe& probe,
                  const std::vector<DeviceSample>& readings, const std::string& gpu_status) {
  Profile& p = ep.profile;
  const ExecRun& r = ep.run;
  p.model = o.runner.command.argv.empty() ? "" : o.runner.command.argv.back();
  p.data = "the program's own";
  p.probe = probe;
  p.phases_split = false;
  p.train.timing_warmup_steps = o.skip_steps;
  p.window_steps = o.window_steps;
  describe_settings(p, r.starts.empty() ? nullptr : &r.starts.front());
  p.records = exec_step_records(r.steps, r.started_unix_s, o.runner.world_size);
  p.steps = static_cast<int64_t>(p.records.size());
  if (p.train.batch_size == 0 && !p.records.empty()) p.train.batch_size = p.records.back().samples;
  p.is_interrupted = r.stopped == ExecStopReason::kInterrupted;
  p.throughput = steady_throughput(p.records, o.skip_steps, o.window_steps);
  p.phases = mean_phases(p.records, static_cast<size_t>(std::max<int64_t>(0, o.skip_steps)));
  for (const StepRecord& s : p.records) p.peak_memory_bytes = std::max(p.peak_memory_bytes, s.peak_memory_bytes);
  // A reported peak is the device's (CUDA); so is GPU memory NVML saw the processes hold.
  // Otherwise the program ran on the host.
  if (p.peak_memory_bytes == 0 && r.peak_gpu_memory_bytes > 0)
    p.peak_memory_bytes = r.peak_gpu_memory_bytes;
  if (p.peak_memory_bytes > 0) p.device = c10::Device(c10::kCUDA, 0);
  else p.peak_memory_bytes = r.peak_rss_bytes;
  p.device_samples = summarize_samples(readings, p.throughput.steps);
  p.device_samples.process_rss_peak_bytes = r.peak_rss_bytes;
  p.gpu_status = gpu_status;
  p.ranks = {RankTimes{p.phases.step_ms, p.phases.step_ms, 0, p.phases.data_wait_ms}};
  p.one_process_why = "an --exec program";
  p.details.push_back("command       " + ep.command_line);
  p.details.push_back("mode          " + (ep.mode.empty() ? std::string("no start line") : ep.mode) +
                      "; applied: " + (ep.applied.empty() ? "none" : join({ep.applied.begin(), ep.applied.end()}, ", ")) +
                      (ep.ignored.empty() ? "" : "; ignored: " + join({ep.ignored.begin(), ep.ignored.end()}, ", ")));
  for (const ExecProcessUse& u : r.processes)
    p.details.push_back("process       " + process_line(u, r.wall_s));
  // The program's own processes after the first (DataLoader workers, mostly), seen for at least
  // half the run: their CPU per second seen.
  for (size_t i = 1; i < r.processes.size(); ++i)
    if (r.processes[i].seen_s > 0.5 * r.wall_s)
      p.input_worker_cores.push_back(r.processes[i].cpu_s / r.processes[i].seen_s);
  if (r.peak_gpu_memory_bytes >= 0)
    p.details.push_back("GPU memory    " + format_bytes(r.peak_gpu_memory_bytes) +
                        " held by its processes at most (NVML, per PID)");
  if (!r.memory_limit_how.empty()) p.details.push_back("memory limit  " + r.memory_limit_how);
  for (const std::string& w : r.warnings) p.details.push_back("warning       " + w);
}

}  // namespace

ExecProfile run_exec_profile(const ExecProfileOptions& o, const DeviceProbe& probe) {
  ExecTrialRunner runner(o.runner);
  ExecSettings settings = o.settings;
  if (o.steps > 0) settings["max_steps"] = std::to_string(o.steps);
  else settings.erase("max_steps");
  DeviceSampler sampler(o.sampler);
  std::vector<DeviceSample> readings = {sampler.sample_now()};
  sampler.start();
  ExecProfile ep;
  ep.run = runner.run_as_given(settings, "profile");
  sampler.stop();
  const std::vector<DeviceSample> more = sampler.samples();
  readings.insert(readings.end(), more.begin(), more.end());
  const ExecStart* start = ep.run.starts.empty() ? nullptr : &ep.run.starts.front();
  ep.mode = start ? start->mode : "";
  ep.applied = exec_applied(o.runner.command, settings, start);
  for (const auto& [name, value] : settings)
    if (name != "max_steps" && ep.applied.count(name) == 0) ep.ignored.insert(name);
  std::vector<std::string> words;
  for (const std::string& w : exec_argv(o.runner.command, settings)) words.push_back(shell_quote(w));
  ep.command_line = join(words, " ");
  fill_profile(ep, o, probe, readings, sampler.gpu_status());
  if (o.sink != nullptr) {
    o.sink->on_begin(ep.profile.steps);
    for (const StepRecord& r : ep.profile.records) o.sink->on_step(r);
    for (const ExecEval& e : ep.run.evals) o.sink->on_eval(e.step, e.name, e.value);
    o.sink->on_end();
  }
  return ep;
}

}  // namespace saturate
