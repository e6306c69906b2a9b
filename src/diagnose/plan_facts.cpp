// SPDX-License-Identifier: Apache-2.0
#include "saturate/diagnose/plan_facts.h"

#include <algorithm>

namespace saturate {

void add_plan_facts(RunFacts& facts, const Plan& plan, int64_t memory_limit_bytes) {
  StepRecord tuned_step;
  const PhaseBreakdown& ph = plan.tuned.phases;
  tuned_step.data_wait_ms = ph.data_wait_ms;
  tuned_step.host_to_device_ms = ph.host_to_device_ms;
  tuned_step.forward_ms = ph.forward_ms;
  tuned_step.backward_ms = ph.backward_ms;
  tuned_step.optimizer_ms = ph.optimizer_ms;
  tuned_step.communication_ms = ph.communication_ms;
  tuned_step.other_ms = ph.other_ms;
  tuned_step.step_ms = ph.step_ms;
  facts.steps = {tuned_step};
  // A reduced precision the tune's precision stage measured is not suggested again: the plan
  // holds its verdict (slower, not faster beyond noise in two reverse-order rounds, or taken).
  for (const PlanTrial& t : plan.trials) {
    if (t.stage == "input_pipeline") facts.workers_measured = std::max(facts.workers_measured, t.config.workers);
    if (t.stage != "precision" || !t.fits) continue;
    if (t.config.train.precision == Precision::kBf16) facts.bf16_fast = false;
    if (t.config.train.precision == Precision::kFp16) facts.fp16_fast = false;
  }
  const RunConfig& c = plan.config;
  facts.precision = to_string(c.train.precision);
  facts.batch_size = c.train.batch_size;
  facts.accumulate = c.train.accumulate;
  facts.recompute_segments = c.train.recompute_segments;
  facts.workers = c.workers;
  facts.memory_limit_bytes = memory_limit_bytes;
  facts.peak_memory_bytes = plan.tuned.peak_memory_bytes;
}

}  // namespace saturate
