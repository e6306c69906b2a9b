// SPDX-License-Identifier: Apache-2.0
#pragma once
// The console view of a tune: each stage as it ends, and the plan's one-paragraph result.
//
//   tune(runner, base, options, [](const PlanStage& s) { print_plan_stage(std::cout, s); });
//   print_plan_result(std::cout, plan, "plan.json");

#include <ostream>
#include <string>

#include "saturate/tune/plan.h"

namespace saturate {

/// "  batch_size     812.3 → 1004.9 samples/s (changed)\n      why\n"
void print_plan_stage(std::ostream& out, const PlanStage& stage);
/// The plan's configuration, speed-up, peak, quality status, cost, and how to run it.
void print_plan_result(std::ostream& out, const Plan& plan, const std::string& plan_path);

}  // namespace saturate
