// SPDX-License-Identifier: Apache-2.0
#include "tune_ranks.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "saturate/core/json.h"
#include "saturate/core/strings.h"
#include "saturate/distributed/launcher.h"

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
               "--summary-json",    summary_path_};
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

}  // namespace saturate::cli
