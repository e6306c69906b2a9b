// SPDX-License-Identifier: Apache-2.0
// saturate monitor: an nvidia-smi-like live view of the GPUs (NVML) and the CPU, for a job
// running elsewhere. One line per device per sample, or one JSON object per sample.
#include <chrono>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "command.h"
#include "saturate/core/error.h"
#include "saturate/core/units.h"
#include "saturate/telemetry/device_sampler.h"

namespace saturate::cli {
namespace {

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

}  // namespace

int run_monitor(const std::vector<std::string>& args) {
  SamplerOptions options;
  options.interval_ms = 1000;
  int64_t count = 0;
  bool as_json = false;
  CLI::App app{"Watch GPU (through NVML) and CPU utilisation, memory, power and clocks.",
               "saturate monitor"};
  app.add_option("--interval", options.interval_ms, "milliseconds between samples")
      ->capture_default_str();
  app.add_option("--count", count, "samples to print; 0 = until Ctrl-C")->capture_default_str();
  app.add_option("--nvml", options.nvml_library, "path of libnvidia-ml.so.1 (default: the system's)");
  app.add_flag("--json", as_json, "one JSON object per sample");
  if (!parse_args(app, args)) return 0;
  SATURATE_CHECK(count >= 0, "monitor: --count must not be negative, got ", count);
  DeviceSampler sampler(options);  // validates the interval
  if (!as_json) std::cerr << "saturate monitor: " << sampler.gpu_status() << "\n";
  sampler.sample_now();  // CPU utilisation is measured between two readings
  const auto interval = std::chrono::duration<double, std::milli>(options.interval_ms);
  for (int64_t i = 0; count == 0 || i < count; ++i) {
    const auto wake = std::chrono::steady_clock::now() + interval;
    while (std::chrono::steady_clock::now() < wake) {
      if (g_interrupted.load()) return static_cast<int>(ExitCode::kInterrupted);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const DeviceSample s = sampler.sample_now();
    if (as_json) {
      std::cout << to_json(s).dump() << std::endl;
      continue;
    }
    std::cout << format_fixed(s.t_s, 1) << " s  cpu " << format_fixed(s.cpu.util_pct, 0) << "%";
    for (double core : s.cpu.per_core_util_pct) std::cout << " " << format_fixed(core, 0);
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
