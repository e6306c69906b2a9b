// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a tune's plan tells the diagnosis rules: the tuned configuration, its measured step
// breakdown and peak, and what the precision stage measured (a reduced precision the stage
// tried and did not keep is not "much faster", whatever the hardware flags suggest: a CPU may
// have avx512_bf16 and still lose, or win one reading by drift and lose the next).
//
//   RunFacts facts = environment_facts(...);
//   add_plan_facts(facts, plan, memory_limit_bytes);
//   std::vector<Finding> findings = diagnose(facts);

#include <cstdint>

#include "saturate/diagnose/diagnose.h"
#include "saturate/tune/plan.h"

namespace saturate {

void add_plan_facts(RunFacts& facts, const Plan& plan, int64_t memory_limit_bytes);

}  // namespace saturate
