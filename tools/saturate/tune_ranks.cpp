// SPDX-License-Identifier: Apache-2.0
#include "tune_ranks.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "saturate/core/json.h"
#include "saturate/core/strings.h"
#include "saturate/device/threads.h"
#include "saturate/distributed/launcher.h"
#include "saturate/models/model.h"
#include "saturate/report/plan_report.h"
#include "saturate/tune/ranks_stage.h"

namespace saturate::cli {

LaunchJobRunner::LaunchJobRunner(const Plan& plan)
    : scratch_("saturate-tune", "tune"),
      plan_path_(scratch_.file("plan.json")),
      summary_path_(scratch_.file("summary.json")) {
  write_json_file(plan_path_, to_json(plan));
}

JobOutcome LaunchJobRunner::run(const JobRequest& request) {
  const RunConfig& c = request.config;
  std::remove(summary_path_.c_str());
  LaunchOptions o;
  o.nproc_per_node = c.world_size;
  o.prefix = false;
  o.quiet = true;
  o.grace_s = 5;
  o.command = {self_executable(),   "train",
               "--config",          plan_path_,
               "--batch-size",      std::to_string(c.train.batch_size),
               "--accumulate",      std::to_string(c.train.accumulate),
               "--threads",         std::to_string(c.threads),
               "--steps",           std::to_string(request.steps),
               "--no-eval",         "-q",
               "--summary-json",    summary_path_,
               "--pipeline-stages", std::to_string(c.pipeline_stages),
               "--tensor-parallel", std::to_string(c.tensor_parallel)};
  if (c.pipeline_stages > 1) {
    if (c.micro_batches > 0) o.command.insert(o.command.end(), {"--micro-batches", std::to_string(c.micro_batches)});
    o.command.insert(o.command.end(), {"--pipeline-schedule", c.pipeline_schedule});
  }
  std::ostringstream out, err;
  const auto start = std::chrono::steady_clock::now();
  const LaunchResult r = launch(o, out, err);
  JobOutcome job;
  job.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r.exit_code == static_cast<int>(ExitCode::kInterrupted)) {
    job.status = JobStatus::kInterrupted;
    return job;
  }
  if (r.exit_code != 0) {
    job.status = JobStatus::kFailed;
    job.reason = r.failed_rank >= 0 ? r.reason : first_line(err.str());
    return job;
  }
  std::ifstream in(summary_path_);
  const nlohmann::json s = nlohmann::json::parse(in, nullptr, false);
  if (!s.is_object() || !s.contains("job_samples_per_s")) {
    job.status = JobStatus::kFailed;
    job.reason = "it wrote no summary";
    return job;
  }
  job.job_samples_per_s = s["job_samples_per_s"].get<double>();
  job.peak_memory_bytes = s.value("peak_memory_bytes", int64_t{0});
  return job;
}

void run_ranks_stage(Plan& plan, const Recipe& recipe, const TrainingInput& input,
                     const std::string& model, int max_ranks, double budget_s,
                     int64_t memory_limit_bytes) {
  RanksStageOptions ri;
  ri.on_cpu = recipe.device.is_cpu();
  ri.cores = usable_cores();
  ri.max_ranks = max_ranks > 0 ? max_ranks : ri.cores;
  {
    auto m = make_model(model, model_inputs_for(input));
    ri.model_has_buffers = m->state_tensors().size() > m->parameters().size();
    ri.pipeline_layers = m->pipeline_layers();
    for (int n = 2; n <= ri.cores; n *= 2)
      if (m->tensor_parallel_problem(n).empty()) ri.tensor_parallel_sizes.push_back(n);
  }
  // Memory bound the plan: the user's configuration ran out of memory, the plan's did (no
  // measurement), or it fits only through accumulation or recomputation.
  const TrainOptions& t = plan.config.train;
  ri.user_did_not_fit = plan.baseline.samples_per_s <= 0 || plan.tuned.samples_per_s <= 0 ||
                        t.accumulate > 1 || t.recompute_segments > 0;
  ri.budget_left_s = budget_s > 0 ? std::max(0.0, budget_s - plan.tune_wall_s) : -1.0;
  ri.stop = &g_interrupted;
  // Every process of a candidate on this host shares the memory the trials planned for.
  ri.memory_limit_bytes = memory_limit_bytes;
  ri.reserve = plan.reserve;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t stages = plan.stages.size();
  LaunchJobRunner jobs(plan);
  tune_ranks(plan, ri, jobs);
  if (plan.stages.size() > stages) print_plan_stage(std::cout, plan.stages.back());
  plan.tune_wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace saturate::cli
