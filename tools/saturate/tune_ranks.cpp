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
#include "saturate/core/units.h"
#include "saturate/device/device_memory.h"
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

namespace {

// Pipeline stages: the highest stage's peak (rank 0 holds the first stage only) and where the
// run cut them, each stage's layer count, for the plan to cut the same.
void read_stages(const nlohmann::json& s, JobOutcome& job) {
  const auto p = s.find("pipeline");
  if (p == s.end() || !p->is_object() || !p->contains("per_stage")) return;
  std::string counts;
  for (const nlohmann::json& st : (*p)["per_stage"]) {
    job.peak_memory_bytes = std::max(job.peak_memory_bytes, st.value("peak_memory_bytes", int64_t{0}));
    const int64_t n = st.value("last_layer", int64_t{-1}) - st.value("first_layer", int64_t{0}) + 1;
    counts += (counts.empty() ? "" : ",") + std::to_string(n);
  }
  job.pipeline_split = counts;
}

}  // namespace

JobOutcome LaunchJobRunner::run(const JobRequest& request) {
  const RunConfig& c = request.config;
  std::remove(summary_path_.c_str());
  LaunchOptions o;
  o.nproc_per_node = c.world_size;
  o.prefix = false;
  o.quiet = true;
  o.warn_on_failure = false;  // the stage records each failed run with its reason
  o.grace_s = 5;
  o.command = {self_executable(),   "train",
               "--config",          plan_path_,
               "--batch-size",      std::to_string(c.train.batch_size),
               "--accumulate",      std::to_string(c.train.accumulate),
               // A split drops the plan file's recomputation: the flag overrides the file.
               "--recompute-segments", std::to_string(c.train.recompute_segments),
               "--threads",         std::to_string(c.threads),
               "--steps",           std::to_string(request.steps),
               "-q",
               "--summary-json",    summary_path_,
               "--pipeline-stages", std::to_string(c.pipeline_stages),
               "--tensor-parallel", std::to_string(c.tensor_parallel)};
  if (!request.validate) o.command.push_back("--no-eval");
  if (c.pipeline_stages > 1) {
    if (c.micro_batches > 0) o.command.insert(o.command.end(), {"--micro-batches", std::to_string(c.micro_batches)});
    o.command.insert(o.command.end(), {"--pipeline-schedule", c.pipeline_schedule,
                                       "--pipeline-split", c.pipeline_split});
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
  read_stages(s, job);
  if (s.contains("val_accuracy") && s["val_accuracy"].is_number())
    job.val_accuracy = s["val_accuracy"].get<double>();
  if (s.contains("val_loss") && s["val_loss"].is_number()) job.val_loss = s["val_loss"].get<double>();
  return job;
}

ModelLayoutFacts model_layout_facts(const std::string& model, const TrainingInput& input,
                                    int max_ranks) {
  ModelLayoutFacts f;
  auto m = make_model(model, model_inputs_for(input));
  f.has_buffers = m->state_tensors().size() > m->parameters().size();
  for (const at::Tensor& p : m->parameters()) f.param_bytes += p.numel() * p.element_size();
  f.pipeline_layers = m->pipeline_layers();
  for (int n = 2; n <= std::max(usable_cores(), max_ranks); n *= 2)
    if (m->tensor_parallel_problem(n).empty()) f.tensor_parallel_sizes.push_back(n);
  return f;
}

bool ModelLayoutFacts::splits(int max_ranks) const {
  if (usable_cores() < 2 || (max_ranks > 0 && max_ranks < 2)) return false;
  return pipeline_layers >= 2 || !tensor_parallel_sizes.empty();
}

// The ranks of a CPU node share its memory: without a --memory-limit each plans for its share.
int64_t tune_memory_limit(const Recipe& recipe, const DataParallelRun& dp) {
  int64_t memory_limit = recipe.memory_limit_bytes;
  if (dp.group && dp.device.is_cpu() && memory_limit == 0)
    memory_limit = host_memory_share(dp.env.local_world_size);
  return memory_limit;
}

// One process that cannot hold one sample leaves the layout to the ranks stage, where it can
// split the model over processes (not when this tune is one rank of a launched job). Each of
// them builds the whole model before it keeps its part: weights alone past the limit cannot be
// split here.
bool may_split(const Recipe& recipe, const DataParallelRun& dp, const ModelLayoutFacts& layout,
               int max_ranks, int64_t memory_limit) {
  return recipe.device.is_cpu() && !dp.group && layout.splits(max_ranks) &&
         (memory_limit == 0 || layout.param_bytes < memory_limit);
}

// After the ranks stage: a model one process could not hold trains only split.
void check_some_layout_runs(const Plan& plan, int64_t memory_limit) {
  SATURATE_CHECK(!plan.one_process_does_not_fit || plan.interrupted ||
                     plan.config.ranks_per_replica() > 1,
                 "tune: one sample does not fit one process under the ", format_bytes(memory_limit),
                 " memory limit, and no split of the model over processes ran within it either "
                 "(the ranks stage above); raise --memory-limit or pick a smaller model");
}

void run_ranks_stage(Plan& plan, const Recipe& recipe, const ModelLayoutFacts& model,
                     int max_ranks, double budget_s, int64_t memory_limit_bytes,
                     int64_t quality_samples, double quality_tolerance) {
  RanksStageOptions ri;
  ri.on_cpu = recipe.device.is_cpu();
  ri.cores = usable_cores();
  ri.max_ranks = max_ranks > 0 ? max_ranks : ri.cores;
  ri.model_has_buffers = model.has_buffers;
  ri.pipeline_layers = model.pipeline_layers;
  ri.tensor_parallel_sizes = model.tensor_parallel_sizes;
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
  ri.quality_samples = plan.quality.samples > 0 ? plan.quality.samples : quality_samples;
  ri.quality_tolerance = quality_tolerance;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t stages = plan.stages.size();
  LaunchJobRunner jobs(plan);
  tune_ranks(plan, ri, jobs);
  if (plan.stages.size() > stages) print_plan_stage(std::cout, plan.stages.back());
  plan.tune_wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace saturate::cli
