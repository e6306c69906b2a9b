// SPDX-License-Identifier: Apache-2.0
// saturate monitor: an nvidia-smi-like live view of the GPUs (NVML) and the CPU, for a job
// running elsewhere. One line per device per sample, or one JSON object per sample.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "command.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/telemetry/device_sampler.h"
#include "saturate/telemetry/proc_stats.h"

namespace saturate::cli {
namespace {

using detail::concat;

std::string value_or_dash(double v, int digits, const std::string& unit) {
  return v < 0 ? std::string("-") : format_fixed(v, digits) + unit;
}

nlohmann::json to_json(const DeviceSample& s) {
  nlohmann::json j;
  j["t_s"] = s.t_s;
  j["cpu_util_pct"] = s.cpu.util_pct;
  j["cpu_per_core_util_pct"] = s.cpu.per_core_util_pct;
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : s.gpus) {
    j["gpus"].push_back({{"index", g.index}, {"name", g.name}, {"util_pct", g.util_pct},
                         {"mem_used_bytes", g.mem_used_bytes}, {"mem_total_bytes", g.mem_total_bytes},
                         {"temperature_c", g.temperature_c}, {"power_w", g.power_w},
                         {"energy_j", g.energy_j}, {"sm_clock_mhz", g.sm_clock_mhz},
                         {"throttle_reasons", g.throttle_names}});
  }
  return j;
}

std::string right(const std::string& text, size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

// The process --pid names: its CPU (percent of one core) and resident memory between samples.
struct Watched {
  int64_t pid = 0;
  uint64_t ticks = 0;
  double t_s = 0;
  std::optional<PidStat> read(double t_s, double& cpu_pct) {
    std::optional<PidStat> now = read_pid_stat(pid);
    cpu_pct = -1;
    if (now && t_s > this->t_s)
      cpu_pct = 100.0 * static_cast<double>(now->cpu_ticks - std::min(ticks, now->cpu_ticks)) /
                static_cast<double>(sysconf(_SC_CLK_TCK)) / (t_s - this->t_s);
    if (now) ticks = now->cpu_ticks;
    this->t_s = t_s;
    return now;
  }
};

// What is watched and what a sample holds, on stderr; the column header on stdout.
void print_header(const DeviceSampler& sampler, const SamplerOptions& o, const Watched* w,
                  const std::string& comm, size_t cores) {
  std::cerr << "saturate monitor: the whole machine (" << count_of(static_cast<int64_t>(cores), "core")
            << ")" << (w ? concat(" and process ", w->pid, " (", comm, ")") : std::string())
            << ", a sample every " << format_fixed(o.interval_ms, 0) << " ms; GPUs: "
            << sampler.gpu_status()
            << ". With NVIDIA GPUs (NVML) each sample adds a line per GPU: utilisation %, "
               "memory used / total, temperature °C, power W, SM clock MHz and throttle "
               "reasons.\n";
  std::cout << right("time s", 8) << right("cpu all", 9);
  for (size_t c = 0; c < cores; ++c) std::cout << right("core " + std::to_string(c), 8);
  if (w) std::cout << right("pid " + std::to_string(w->pid) + " cpu", 16) << right("rss", 11);
  std::cout << "\n";
}

}  // namespace

int run_monitor(const std::vector<std::string>& args) {
  SamplerOptions options;
  options.interval_ms = 1000;
  int64_t count = 0, pid = 0;
  bool as_json = false;
  CLI::App app{"Watch GPU (through NVML) and CPU utilisation, memory, power and clocks.",
               "saturate monitor"};
  app.add_option("--interval", options.interval_ms, "milliseconds between samples")
      ->capture_default_str();
  app.add_option("--count", count, "samples to print; 0 = until Ctrl-C")->capture_default_str();
  app.add_option("--nvml", options.nvml_library, "path of libnvidia-ml.so.1 (default: the system's)");
  app.add_option("--pid", pid, "also watch this process: its CPU (% of one core) and memory");
  app.add_flag("--json", as_json, "one JSON object per sample");
  if (!parse_args(app, args)) return 0;
  SATURATE_CHECK(count >= 0, "monitor: --count must not be negative, got ", count);
  std::optional<Watched> watched;
  std::string comm;
  if (app.count("--pid") > 0) {
    const std::optional<PidStat> p = read_pid_stat(pid);
    SATURATE_CHECK(p.has_value(), "monitor: --pid ", pid, ": no such process");
    watched = Watched{pid, p->cpu_ticks, 0};
    comm = p->comm;
  }
  DeviceSampler sampler(options);  // validates the interval
  const DeviceSample first = sampler.sample_now();  // CPU utilisation is between two readings
  if (watched) watched->t_s = first.t_s;
  if (!as_json)
    print_header(sampler, options, watched ? &*watched : nullptr, comm,
                 read_proc_stat().cores.size());
  const auto interval = std::chrono::duration<double, std::milli>(options.interval_ms);
  for (int64_t i = 0; count == 0 || i < count; ++i) {
    const auto wake = std::chrono::steady_clock::now() + interval;
    while (std::chrono::steady_clock::now() < wake) {
      if (g_interrupted.load()) return static_cast<int>(ExitCode::kInterrupted);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const DeviceSample s = sampler.sample_now();
    double cpu_pct = -1;
    const std::optional<PidStat> p = watched ? watched->read(s.t_s, cpu_pct) : std::nullopt;
    SATURATE_CHECK_RUN(!watched || p.has_value(), "monitor: process ", pid, " has ended");
    if (as_json) {
      nlohmann::json j = to_json(s);
      if (p) j["process"] = {{"pid", pid}, {"cpu_pct", cpu_pct},
                             {"rss_bytes", p->rss_pages * sysconf(_SC_PAGESIZE)}};
      std::cout << j.dump() << std::endl;
      continue;
    }
    std::cout << right(format_fixed(s.t_s, 1), 8) << right(format_fixed(s.cpu.util_pct, 0) + "%", 9);
    for (double core : s.cpu.per_core_util_pct) std::cout << right(format_fixed(core, 0) + "%", 8);
    if (p)
      std::cout << right(value_or_dash(cpu_pct, 0, "%"), 16)
                << right(format_bytes(p->rss_pages * sysconf(_SC_PAGESIZE)), 11);
    std::cout << "\n";
    for (const auto& g : s.gpus) {
      std::cout << "  gpu " << g.index << " " << g.name << "  util "
                << value_or_dash(g.util_pct, 0, "%") << "  mem "
                << (g.mem_used_bytes < 0 ? "-" : format_bytes(g.mem_used_bytes)) << " / "
                << (g.mem_total_bytes < 0 ? "-" : format_bytes(g.mem_total_bytes)) << "  "
                << value_or_dash(g.temperature_c, 0, " C") << "  "
                << value_or_dash(g.power_w, 0, " W") << "  sm "
                << value_or_dash(g.sm_clock_mhz, 0, " MHz");
      for (const auto& t : g.throttle_names) std::cout << "  [" << t << "]";
      std::cout << "\n";
    }
    std::cout.flush();
  }
  return 0;
}

}  // namespace saturate::cli
