// SPDX-License-Identifier: Apache-2.0
// saturate compare A.json B.json: the same workload measured twice (profiles, plans or train
// summaries), each metric's change with a noise-aware verdict; exit code 1 on a regression so
// the command can gate a CI job.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "command.h"
#include "saturate/core/error.h"
#include "saturate/core/units.h"
#include "saturate/report/compare.h"

namespace saturate::cli {
namespace {

std::string value_text(const std::string& name, double v) {
  if (name == "peak_memory_bytes") return format_bytes(static_cast<int64_t>(v));
  if (name == "diverged") return v > 0 ? "yes" : "no";
  return format_fixed(v, name == "final_loss" ? 4 : 2);
}

std::string padded(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s;
}

}  // namespace

int run_compare(const std::vector<std::string>& args) {
  std::string a_path, b_path;
  CompareOptions o;
  bool as_json = false;
  CLI::App app{"Compare two measurements of the same workload (profile --json outputs, plans or "
               "train summaries); exit code 1 on a regression.",
               "saturate compare"};
  app.add_option("A", a_path, "the reference run")->required();
  app.add_option("B", b_path, "the run to judge against it")->required();
  app.add_option("--min-change", o.min_change_pct,
                 "smallest samples/s change in % that counts, however significant")
      ->capture_default_str();
  app.add_option("--alpha", o.alpha, "significance level of the per-window test")
      ->capture_default_str();
  app.add_option("--memory-tolerance", o.memory_tolerance_pct,
                 "peak-memory growth in % that is still fine")
      ->capture_default_str();
  app.add_flag("--json", as_json, "print the comparison as JSON");
  if (!parse_args(app, args)) return 0;
  SATURATE_CHECK(o.min_change_pct >= 0, "compare: --min-change must not be negative");
  SATURATE_CHECK(o.alpha > 0 && o.alpha < 1, "compare: --alpha must be in (0, 1), got ", o.alpha);
  SATURATE_CHECK(o.memory_tolerance_pct >= 0, "compare: --memory-tolerance must not be negative");

  const RunMetrics a = read_run_metrics(a_path);
  const RunMetrics b = read_run_metrics(b_path);
  const Comparison c = compare_runs(a, b, o);

  if (as_json) {
    nlohmann::json j;
    j["schema_version"] = 1;
    j["a"] = a_path;
    j["b"] = b_path;
    j["regression"] = c.has_regression();
    j["notes"] = c.notes;
    j["quality_judged"] = c.quality_judged;
    j["metrics"] = nlohmann::json::array();
    for (const MetricComparison& m : c.metrics)
      j["metrics"].push_back({{"name", m.name},
                              {"a", m.a},
                              {"b", m.b},
                              {"delta_pct", m.delta_pct},
                              {"verdict", to_string(m.verdict)},
                              {"basis", m.basis}});
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "saturate compare: " << a_path << " (" << a.kind << ") -> " << b_path << " ("
              << b.kind << ")\n  workload  " << b.workload << "\n";
    for (const std::string& note : c.notes) std::cout << "  note: " << note << "\n";
    std::cout << "  " << padded("metric", 20) << padded("A", 14) << padded("B", 14)
              << padded("change", 10) << "verdict\n";
    for (const MetricComparison& m : c.metrics) {
      std::string change = (m.delta_pct >= 0 ? "+" : "") + format_fixed(m.delta_pct, 1) + "%";
      std::cout << "  " << padded(m.name, 20) << padded(value_text(m.name, m.a), 14)
                << padded(value_text(m.name, m.b), 14) << padded(change, 10)
                << to_string(m.verdict) << "\n    " << m.basis << "\n";
    }
    std::cout << "  quality judged: " << c.quality_judged << "\n"
              << (c.has_regression() ? "  REGRESSION\n" : "  no regression\n");
  }
  return static_cast<int>(c.has_regression() ? ExitCode::kFailure : ExitCode::kOk);
}

}  // namespace saturate::cli
