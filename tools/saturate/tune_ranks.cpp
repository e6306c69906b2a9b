// SPDX-License-Identifier: Apache-2.0
// The ranks stage of a CPU tune: the same global batch as 1 process × T threads or as W
// data-parallel processes × T/W threads each. Which is faster depends on the model and the
// machine (small GEMMs scale badly over threads; processes pay for the all-reduce), so both
// run, as `saturate train --config` runs the plan, and the faster stays.
#include "tune_ranks.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "saturate/core/error.h"
#include "saturate/core/json.h"
#include "saturate/core/log.h"
#include "saturate/core/strings.h"
#include "saturate/core/temp_folder.h"
#include "saturate/core/units.h"
#include "saturate/dist/launcher.h"
#include "saturate/telemetry/throughput.h"
#include "saturate/tune/tuner.h"

namespace saturate::cli {
namespace {

struct Candidate {
  int ranks = 1;
  int threads = 1;
  TrialConfig config;
  std::vector<double> job_samples_per_s;  // one per run
  double median() const { return saturate::median(job_samples_per_s); }
  std::string describe() const {
    return std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + " × " +
           std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  }
};

// The plan's config as `ranks` processes: each takes its share of the global batch and keeps
// the plan's micro-batch.
TrialConfig as_ranks(const TrialConfig& c, int ranks, int threads) {
  TrialConfig out = c;
  out.world_size = ranks;
  out.threads = threads;
  out.train.batch_size = c.train.batch_size * c.world_size / ranks;
  const int64_t micro = c.micro_batch();
  out.train.accumulate = std::max<int64_t>(1, (out.train.batch_size + micro - 1) / micro);
  return out;
}

// One run of `candidate` through train, as the plan would run: job samples/s (steady state).
double measure(const Candidate& candidate, const std::string& plan_path,
               const std::string& summary_path, int64_t steps) {
  std::remove(summary_path.c_str());
  LaunchOptions o;
  o.nproc_per_node = candidate.ranks;
  o.prefix = false;
  o.quiet = true;
  o.grace_s = 5;
  o.command = {self_executable(),     "train",
               "--config",            plan_path,
               "--batch-size",        std::to_string(candidate.config.train.batch_size),
               "--accumulate",        std::to_string(candidate.config.train.accumulate),
               "--threads",           std::to_string(candidate.threads),
               "--steps",             std::to_string(steps),
               "--no-eval",           "-q",
               "--summary-json",      summary_path};
  std::ostringstream out, err;
  const LaunchResult r = launch(o, out, err);
  SATURATE_CHECK(r.exit_code == 0, "tune: ranks stage: ", candidate.describe(), " failed: ",
                 r.failed_rank >= 0 ? r.reason : first_line(err.str()));
  std::ifstream in(summary_path);
  const nlohmann::json s = nlohmann::json::parse(in, nullptr, false);
  SATURATE_CHECK(s.is_object() && s.contains("job_samples_per_s"), "tune: ranks stage: ",
                 candidate.describe(), " wrote no summary");
  return s["job_samples_per_s"].get<double>();
}

}  // namespace

void tune_ranks(Plan& plan, const RanksStageInput& in) {
  PlanStage stage;
  stage.name = "ranks";
  const TrialConfig& tuned = plan.config;
  const auto skip = [&](const std::string& why) {
    stage.why = why;
    plan.stages.push_back(stage);
  };
  if (!in.on_cpu) return;  // a GPU per rank is the launcher's choice, not a knob
  if (in.cores < 2) return skip("one usable core: no second process to try");
  if (in.max_ranks < 2) return skip("not tried (--max-ranks " + std::to_string(in.max_ranks) + ")");
  if (in.model_has_buffers)
    return skip("not tried: the model keeps BatchNorm statistics, which each rank would take "
                "from its share of the batch (a different model from one process's)");
  const int64_t global = tuned.train.batch_size * tuned.world_size;
  std::vector<Candidate> candidates;
  Candidate one;
  one.ranks = 1;
  one.threads = tuned.threads > 0 ? tuned.threads : in.cores;
  one.config = as_ranks(tuned, 1, one.threads);
  candidates.push_back(one);
  for (int ranks = 2; ranks <= std::min(in.cores, in.max_ranks); ranks *= 2) {
    // Ranks step on equal batches: a global batch that does not split evenly is rounded down
    // (973 → 2 × 486), at most ranks - 1 samples less.
    if (global < ranks) continue;
    Candidate c;
    c.ranks = ranks;
    c.threads = std::max(1, in.cores / ranks);
    c.config = as_ranks(tuned, ranks, c.threads);
    candidates.push_back(c);
  }
  if (candidates.size() < 2)
    return skip("the global batch " + std::to_string(global) + " is too small to split over 2 ranks");
  // Long enough for a steady state past the untimed warm-up: about 1.5 s of training each.
  const double sps = std::max(1.0, plan.tuned.samples_per_s);
  const int64_t steps = std::clamp<int64_t>(
      static_cast<int64_t>(1.5 * sps / static_cast<double>(global)), 20, 300);
  const double per_run_s = 1.5 + static_cast<double>(steps * global) / sps;  // with start-up
  const int rounds = 2;
  const double cost_s = per_run_s * static_cast<double>(rounds * candidates.size());
  if (in.budget_left_s >= 0 && cost_s > in.budget_left_s)
    return skip("not tried: " + std::to_string(rounds * candidates.size()) + " runs of about " +
                format_duration_s(per_run_s) + " exceed the " + format_duration_s(in.budget_left_s) +
                " of budget left");
  const TempFolder scratch("saturate-tune", "tune");
  const std::string plan_path = scratch.file("plan.json");
  const std::string summary_path = scratch.file("summary.json");
  write_json_file(plan_path, to_json(plan));
  // Rounds alternate the candidates, so a drift of the machine's speed touches each alike.
  for (int round = 0; round < rounds; ++round) {
    for (Candidate& c : candidates) {
      if (in.stop && in.stop->load()) break;
      c.job_samples_per_s.push_back(measure(c, plan_path, summary_path, steps));
      PlanTrial t;
      t.stage = "ranks";
      t.purpose = round == 0 ? "throughput" : "repeat";
      t.config = c.config;
      t.fits = true;
      t.samples_per_s = c.job_samples_per_s.back();
      t.steps = steps * c.ranks;
      plan.trials.push_back(t);
      plan.probe_steps += steps * c.ranks;
    }
  }
  const Candidate* best = &candidates[0];
  for (const Candidate& c : candidates)
    if (c.median() > best->median()) best = &c;
  // More processes must beat one clearly: run-to-run noise here is a few percent.
  constexpr double kMargin = 1.03;
  const bool change = best != &candidates[0] && best->median() > kMargin * candidates[0].median();
  std::string measured;
  for (const Candidate& c : candidates) {
    const int64_t g = c.config.train.batch_size * c.ranks;
    measured += (measured.empty() ? "" : ", ") + c.describe() + " " + format_fixed(c.median(), 1) +
                (g != global ? " (global batch " + std::to_string(g) + ")" : "");
  }
  stage.before_samples_per_s = candidates[0].median();
  stage.after_samples_per_s = change ? best->median() : candidates[0].median();
  stage.changed = change;
  stage.why = "global batch " + std::to_string(global) + ", samples/s of the job (median of " +
              std::to_string(rounds) + " train runs of " + std::to_string(steps) +
              " steps each): " + measured + "; " +
              (change ? "kept " + best->describe() + " (run it with saturate train --config, "
                        "which starts the ranks)"
                      : best == &candidates[0]
                            ? "one process is fastest"
                            : "kept one process: " + best->describe() + " is within " +
                                  format_fixed(100 * (kMargin - 1), 0) + "% of it");
  if (change) {
    plan.config = best->config;
    plan.tuned.samples_per_s = best->median();
    const int64_t rounded = best->config.train.batch_size * best->ranks;
    if (rounded != global && plan.effective_batch == "lr_rescaled")
      plan.config.train.lr =
          rescaled_lr(tuned.train.lr, tuned.train.optimizer, global, rounded);
  }
  plan.stages.push_back(stage);
}

}  // namespace saturate::cli
