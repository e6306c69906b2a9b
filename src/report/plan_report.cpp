// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/plan_report.h"

#include <algorithm>

#include "saturate/core/units.h"

namespace saturate {

void print_plan_stage(std::ostream& out, const PlanStage& s) {
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

void print_plan_result(std::ostream& out, const Plan& plan, const std::string& plan_path) {
  const double gain = plan.baseline.samples_per_s > 0
                          ? plan.tuned.samples_per_s / plan.baseline.samples_per_s
                          : 0.0;
  out << "plan" << (plan.interrupted ? " (interrupted: partial)" : "") << ": "
      << plan.config.describe()
      << (plan.exec.empty() ? ", lr " + format_fixed(plan.config.train.lr, 6) : std::string())
      << "\n  " << format_fixed(plan.baseline.samples_per_s, 1) << " → "
      << (plan.tuned.samples_per_s > 0 ? format_fixed(plan.tuned.samples_per_s, 1)
                                       : std::string("(not measured at this configuration)"))
      << " samples/s";
  if (gain > 0) out << " (" << format_fixed(gain, 2) << "×)";
  out << ", peak " << format_bytes(plan.tuned.peak_memory_bytes) << "; quality "
      << to_string(plan.quality.status) << "; " << plan.probe_steps << " trial steps in "
      << format_duration_s(plan.tune_wall_s);
  if (plan.budget_s > 0) out << " (budget " << format_duration_s(plan.budget_s) << ")";
  out << "\n  written to " << plan_path << "; run it with: saturate train --config " << plan_path
      << "\n";
}

}  // namespace saturate
