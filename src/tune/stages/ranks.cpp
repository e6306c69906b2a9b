// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/ranks_stage.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "saturate/core/units.h"
#include "saturate/telemetry/throughput.h"
#include "saturate/tune/noise_rule.h"
#include "saturate/tune/effective_batch.h"

namespace saturate {
namespace {

struct Candidate {
  int ranks = 1;
  int threads = 1;
  bool pipeline = false;  // ranks are pipeline stages, each with its own memory
  bool tensor = false;    // ranks are tensor-parallel shares, each with its own memory
  int shares = 1;         // both: ranks are stages of this many shares each
  RunConfig config;
  std::vector<double> job_samples_per_s;  // one per successful run
  int64_t peak_memory_bytes = 0;          // one process's, highest over the runs
  std::string failed;                     // why a run failed (empty: none did)
  bool over_memory = false;
  double median() const { return job_samples_per_s.empty() ? 0.0 : saturate::median(job_samples_per_s); }
  double noise() const { return relative_standard_error(job_samples_per_s); }
  bool usable() const { return failed.empty() && !over_memory && !job_samples_per_s.empty(); }
  // What is held to the memory limit: data-parallel ranks share the host's memory, a
  // pipeline's stages each hold their own part of the model under their own limit.
  int64_t limited_bytes() const { return peak_memory_bytes * (pipeline || tensor ? 1 : ranks); }
  std::string describe() const {
    const std::string both = pipeline && tensor
        ? std::to_string(ranks / shares) + " pipeline stages of " + std::to_string(shares) +
              " tensor-parallel ranks (" + std::to_string(ranks) + " processes)"
        : "";
    const char* kind = pipeline ? " pipeline stages"
                       : tensor ? " tensor-parallel ranks"
                       : ranks == 1 ? " rank" : " ranks";
    return (both.empty() ? std::to_string(ranks) + kind : both) + " × " +
           std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  }
};

// The plan's config as `ranks` processes: each takes its share of the global batch and keeps
// the plan's micro-batch.
RunConfig as_ranks(const RunConfig& c, int ranks, int threads) {
  RunConfig out = c;
  out.world_size = ranks;
  out.threads = threads;
  out.train.batch_size = c.train.batch_size * c.world_size / ranks;
  out.train.accumulate = micro_batches_for(out.train.batch_size, c.micro_batch());
  return out;
}

// The plan's global batch as one replica over `ranks` processes that share the model between
// them, each step whole: no accumulation or recomputation, which a split does not do yet.
RunConfig as_one_replica(const RunConfig& c, int ranks, int threads) {
  RunConfig out = c;
  out.world_size = ranks;
  out.threads = threads;
  out.train.batch_size = c.train.batch_size * c.world_size;
  out.train.accumulate = 1;
  out.train.recompute_segments = 0;
  return out;
}

// ... as `stages` pipeline stages (the pipeline's micro-batches hold the memory down), each
// split by tensor over `shares` processes that all take the whole batch: stages × shares
// processes.
RunConfig as_split(const RunConfig& c, int stages, int shares, int threads) {
  RunConfig out = as_one_replica(c, stages * shares, threads);
  if (stages > 1) {
    out.pipeline_stages = stages;
    out.micro_batches = std::min<int64_t>(4 * stages, out.train.batch_size);
    out.pipeline_schedule = "1f1b";
  }
  out.tensor_parallel = shares;
  return out;
}

bool dp_allowed(const RanksStageOptions& o) {
  return o.cores >= 2 && o.max_ranks >= 2 && !o.model_has_buffers;
}

// The plan as one replica split over stages × shares processes sharing the cores.
Candidate split_candidate(const RunConfig& tuned, const RanksStageOptions& o, int stages, int shares) {
  Candidate c;
  c.ranks = stages * shares;
  c.pipeline = stages > 1;
  c.tensor = shares > 1;
  c.shares = shares;
  c.threads = std::max(1, o.cores / c.ranks);
  c.config = as_split(tuned, stages, shares, c.threads);
  return c;
}

void add_pipelines(const RunConfig& tuned, const RanksStageOptions& o, std::vector<Candidate>& out) {
  if (!o.user_did_not_fit || o.pipeline_layers < 2) return;
  const int64_t global = tuned.train.batch_size * tuned.world_size;
  const int most = static_cast<int>(std::min<int64_t>(o.max_ranks, o.pipeline_layers));
  for (int stages = 2; stages <= most && stages <= global; stages *= 2)
    out.push_back(split_candidate(tuned, o, stages, /*shares=*/1));
}

// Split by tensor; and, where the model's chain splits too, stages of shares.
void add_tensor_parallel(const RunConfig& tuned, const RanksStageOptions& o,
                         std::vector<Candidate>& out) {
  const TrainOptions& t = tuned.train;
  if (!o.user_did_not_fit || t.adaptive_batch) return;
  const int64_t global = t.batch_size * tuned.world_size;
  for (int shares : o.tensor_parallel_sizes)
    if (shares <= o.max_ranks) out.push_back(split_candidate(tuned, o, /*stages=*/1, shares));
  for (int shares : o.tensor_parallel_sizes)
    for (int stages = 2; stages * shares <= o.max_ranks && stages <= o.pipeline_layers &&
                         stages <= global; stages *= 2)
      out.push_back(split_candidate(tuned, o, stages, shares));
}

std::vector<Candidate> candidates_for(const RunConfig& tuned, const RanksStageOptions& o) {
  const int64_t global = tuned.train.batch_size * tuned.world_size;
  std::vector<Candidate> out;
  Candidate one;
  one.threads = tuned.threads > 0 ? tuned.threads : o.cores;
  one.config = as_ranks(tuned, 1, one.threads);
  out.push_back(one);
  add_pipelines(tuned, o, out);
  add_tensor_parallel(tuned, o, out);
  if (!dp_allowed(o)) return out;
  for (int ranks = 2; ranks <= std::min(o.cores, o.max_ranks); ranks *= 2) {
    // Ranks step on equal batches: a global batch that does not split evenly is rounded down
    // (973 → 2 × 486), at most ranks - 1 samples less.
    if (global < ranks) continue;
    Candidate c;
    c.ranks = ranks;
    c.threads = std::max(1, o.cores / ranks);
    c.config = as_ranks(tuned, ranks, c.threads);
    out.push_back(c);
  }
  return out;
}

// Why the stage does not run, or empty.
std::string reason_to_skip(const Plan& plan, const RanksStageOptions& o, size_t candidates) {
  if (candidates >= 2 && !dp_allowed(o)) return "";  // pipeline stages or tensor shares only
  if (o.cores < 2) return "one usable core: no second process to try";
  if (o.max_ranks < 2) return "not tried (--max-ranks " + std::to_string(o.max_ranks) + ")";
  if (o.model_has_buffers)
    return "not tried: the model keeps BatchNorm statistics, which each rank would take from its "
           "share of the batch (a different model from one process's)";
  if (candidates < 2)
    return "the global batch " + std::to_string(plan.config.train.batch_size * plan.config.world_size) +
           " is too small to split over 2 ranks";
  return "";
}

void record_trial(Plan& plan, const Candidate& c, const JobOutcome& out, int round, int64_t steps) {
  PlanTrial t;
  t.stage = "ranks";
  t.purpose = round == 0 ? "throughput" : "repeat";
  t.config = c.config;
  t.fits = out.status == JobStatus::kOk;
  t.samples_per_s = out.job_samples_per_s;
  t.peak_memory_bytes = out.peak_memory_bytes * c.ranks;
  t.steps = steps * c.ranks;
  plan.trials.push_back(t);
  plan.probe_steps += steps * c.ranks;
}

std::string measured_text(const std::vector<Candidate>& candidates, int64_t global) {
  std::string s;
  for (const Candidate& c : candidates) {
    s += (s.empty() ? "" : ", ") + c.describe() + " ";
    if (!c.failed.empty()) {
      s += "failed (" + c.failed + ")";
    } else if (c.job_samples_per_s.empty()) {
      s += "not run";
    } else {
      s += format_fixed(c.median(), 1);
      if (c.over_memory)
        s += " (needs " + format_bytes(c.limited_bytes()) +
             (c.pipeline ? " a stage" : c.tensor ? " a rank" : "") + ": over the memory limit)";
    }
    const int64_t g = c.config.global_batch();
    if (g != global) s += " (global batch " + std::to_string(g) + ")";
  }
  return s;
}

struct RoundsEnd {
  bool interrupted = false, out_of_budget = false;
};

// Rounds alternate the candidates, so a drift of the machine's speed touches each alike. A stop
// (Ctrl-C, or a job that reports one) or the budget ends them.
RoundsEnd run_rounds(Plan& plan, std::vector<Candidate>& candidates, const RanksStageOptions& o,
                     JobRunner& runner, int64_t steps, double per_run_s) {
  // Time spent: the clock's, or the runs' own account of it where that is more.
  const auto start = std::chrono::steady_clock::now();
  double runs_wall_s = 0;
  auto spent_s = [&] {
    return std::max(runs_wall_s,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  const int64_t memory_target = o.memory_limit_bytes > 0
      ? static_cast<int64_t>(static_cast<double>(o.memory_limit_bytes) * (1.0 - o.reserve)) : 0;
  RoundsEnd end;
  for (int round = 0; round < o.rounds; ++round) {
    for (Candidate& c : candidates) {
      if (!c.failed.empty()) continue;
      if (o.stop && o.stop->load()) return end.interrupted = true, end;
      if (o.budget_left_s >= 0 && spent_s() + per_run_s > o.budget_left_s)
        return end.out_of_budget = true, end;
      const JobOutcome out = runner.run({c.config, steps});
      runs_wall_s += out.wall_s;
      if (out.wall_s > 0) per_run_s = std::max(per_run_s, out.wall_s);
      if (out.status == JobStatus::kInterrupted) return end.interrupted = true, end;
      record_trial(plan, c, out, round, steps);
      if (out.status == JobStatus::kFailed) {
        c.failed = out.reason.empty() ? "it failed" : out.reason;
        continue;
      }
      c.job_samples_per_s.push_back(out.job_samples_per_s);
      c.peak_memory_bytes = std::max(c.peak_memory_bytes, out.peak_memory_bytes);
      // Stages cut where the first run cut them (its balanced profile) in every later run and
      // in the plan: another profile could cut elsewhere, at another speed and memory.
      if (c.config.pipeline_stages > 1 && c.config.pipeline_split == "balanced" &&
          !out.pipeline_split.empty())
        c.config.pipeline_split = out.pipeline_split;
      c.over_memory = memory_target > 0 && c.limited_bytes() > memory_target;
    }
  }
  return end;
}

struct LayoutQuality {
  bool rejected = false, interrupted = false;
  std::string text;
};

std::string validation_text(const JobOutcome& j) {
  std::string s = "val loss " + format_fixed(j.val_loss, 4);
  if (std::isfinite(j.val_accuracy)) s += ", accuracy " + format_fixed(100 * j.val_accuracy, 2) + "%";
  return s;
}

// A layout about to replace one process, checked the way the quality guard checks a change:
// both trained on the same samples from the same seed through train itself, then validated.
// The layout is the same optimisation (its stages, shares or ranks compute one process's
// gradient), so its validation must match one process's within the tolerance; a layout that
// does not (a wrong split, a per-rank statistic) is not kept.
LayoutQuality check_layout_quality(Plan& plan, const Candidate& one, const Candidate& layout,
                                   const RanksStageOptions& o, JobRunner& runner, int64_t global,
                                   double spent_s) {
  LayoutQuality q;
  const std::string no = "its validation was not checked: ";
  if (o.quality_samples <= 0) return q.text = no + "no quality runs (--quality-samples 0)", q;
  if (!one.usable()) return q.text = no + "one process does not run to compare with", q;
  const int64_t steps = std::max<int64_t>(1, (o.quality_samples + global - 1) / global);
  const auto samples = static_cast<double>(steps * global);
  const double need = 2 * o.startup_guess_s + samples / std::max(1.0, one.median()) +
                      samples / std::max(1.0, layout.median());
  if (o.budget_left_s >= 0 && spent_s + need > o.budget_left_s)
    return q.text = no + "two quality runs of about " + format_duration_s(need) +
                    " in all exceed the budget left", q;
  JobOutcome runs[2];
  const Candidate* cs[2] = {&one, &layout};
  for (int i = 0; i < 2; ++i) {
    if (o.stop && o.stop->load()) return q.interrupted = true, q;
    runs[i] = runner.run({cs[i]->config, steps, /*validate=*/true});
    if (runs[i].status == JobStatus::kInterrupted) return q.interrupted = true, q;
    PlanTrial t;
    t.stage = "ranks";
    t.purpose = "quality";
    t.config = cs[i]->config;
    t.fits = runs[i].status == JobStatus::kOk;
    t.samples_per_s = runs[i].job_samples_per_s;
    t.steps = steps * cs[i]->ranks;
    plan.trials.push_back(t);
    plan.probe_steps += t.steps;
  }
  const JobOutcome &a = runs[0], &b = runs[1];
  const std::string n = std::to_string(steps * global) + " samples";
  if (a.status != JobStatus::kOk || !std::isfinite(a.val_loss))
    return q.text = no + "one process's quality run " +
                    (a.status != JobStatus::kOk ? "failed (" + a.reason + ")" : "had no validation"), q;
  if (b.status != JobStatus::kOk || !std::isfinite(b.val_loss))
    return q.rejected = true, q.text = "its quality run " +
               (b.status != JobStatus::kOk ? "failed (" + b.reason + ")" : "had no validation"), q;
  const double tol = o.quality_tolerance;
  const bool accuracy_ok = !std::isfinite(a.val_accuracy) || !std::isfinite(b.val_accuracy) ||
                           a.val_accuracy - b.val_accuracy <= tol;
  const bool loss_ok = b.val_loss - a.val_loss <= tol * std::abs(a.val_loss);
  q.rejected = !(accuracy_ok && loss_ok);
  q.text = "after " + n + " its " + validation_text(b) + (q.rejected ? " is worse than" : " matches") +
           " one process's " + validation_text(a) + (q.rejected ? " beyond" : " within") +
           " the tolerance (" + format_fixed(100 * tol, 1) + " points, " + format_fixed(100 * tol, 1) +
           "% of the loss)";
  return q;
}

std::string verdict_text(const Candidate& one, const Candidate& best, bool change,
                         bool interrupted, double min_gain) {
  if (interrupted) return "interrupted: the plan keeps its processes";
  if (change && !one.usable())
    return "one process does not run within the memory limit: kept " + best.describe() +
           ", which does (run it with saturate train --config, which starts the ranks)";
  if (!one.usable()) return "one process could not be measured: kept the plan's processes";
  if (change)
    return "kept " + best.describe() +
           " (run it with saturate train --config, which starts the ranks)";
  if (&best == &one) return "one process is fastest";
  return "kept one process: " + best.describe() + " is not faster beyond " +
         format_fixed(100 * min_gain, 0) + "% and the runs' noise";
}

}  // namespace

void tune_ranks(Plan& plan, const RanksStageOptions& o, JobRunner& runner) {
  if (!o.on_cpu) return;
  PlanStage stage;
  stage.name = "ranks";
  const RunConfig tuned = plan.config;
  const int64_t global = tuned.train.batch_size * tuned.world_size;
  std::vector<Candidate> candidates = candidates_for(tuned, o);
  if (const std::string why = reason_to_skip(plan, o, candidates.size()); !why.empty()) {
    stage.why = why;
    plan.stages.push_back(stage);
    return;
  }
  // Long enough for a steady state past the untimed warm-up: about 1.5 s of training each.
  // The plan's own rate; the baseline's when the plan's was not measured (out of memory); the
  // fewest steps and a guess of the time when neither was (one process cannot hold the model).
  const double known = std::max(plan.tuned.samples_per_s, plan.baseline.samples_per_s);
  const double sps = std::max(1.0, known);
  const int64_t steps = std::clamp<int64_t>(
      static_cast<int64_t>(1.5 * sps / static_cast<double>(global)), 20, 300);
  const double train_s = known > 0 ? static_cast<double>(steps * global) / sps : o.unknown_run_s;
  double per_run_s = o.startup_guess_s + train_s;  // corrected once a run measured it
  const auto runs_total = static_cast<double>(o.rounds) * static_cast<double>(candidates.size());
  if (o.budget_left_s >= 0 && per_run_s * runs_total > o.budget_left_s) {
    stage.why = "not tried: " + std::to_string(static_cast<int>(runs_total)) + " runs of about " +
                format_duration_s(per_run_s) + " exceed the " + format_duration_s(o.budget_left_s) +
                " of budget left";
    plan.stages.push_back(stage);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const RoundsEnd end = run_rounds(plan, candidates, o, runner, steps, per_run_s);
  bool interrupted = end.interrupted;
  const Candidate& one = candidates[0];
  const Candidate* best = &one;
  for (const Candidate& c : candidates) {
    if (c.usable() && c.median() > best->median()) best = &c;
  }
  // More processes must beat one by the tuner's rule (a clear gain, beyond the runs' noise).
  // When one process failed (out of memory), the fastest layout that ran is taken.
  const bool one_failed = !one.failed.empty() || one.over_memory;
  bool change = !interrupted && best != &one && best->usable() &&
                (one_failed || (one.usable() && beats(best->median(), best->noise(), one.median(),
                                                      one.noise(), o.min_gain)));
  std::string verdict = verdict_text(one, *best, change, interrupted, o.min_gain);
  if (change) {  // and only if its validation matches one process's
    const double spent_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const LayoutQuality q = check_layout_quality(plan, one, *best, o, runner, global, spent_s);
    if (q.interrupted) {
      interrupted = true;
      change = false;
      verdict = verdict_text(one, *best, false, true, o.min_gain);
    } else if (q.rejected) {
      verdict = "kept one process: " + best->describe() + " was fastest, but " + q.text;
      change = false;
      best = &one;
    } else {
      verdict += "; " + q.text;
    }
  }
  stage.before_samples_per_s = one.median();
  stage.after_samples_per_s = change ? best->median() : one.median();
  stage.changed = change;
  stage.why = "global batch " + std::to_string(global) + ", samples/s of the job (median of " +
              std::to_string(o.rounds) + " train runs of " + std::to_string(steps) +
              " steps each): " + measured_text(candidates, global) +
              (end.out_of_budget ? "; stopped at the budget" : "") + "; " + verdict;
  if (change) {
    plan.config = best->config;
    plan.tuned.samples_per_s = best->median();
    // A pipeline's stages (a split's ranks) each hold their own part: the plan's peak is one
    // process's (rank 0's).
    if (best->pipeline || best->tensor) plan.tuned.peak_memory_bytes = best->peak_memory_bytes;
    const int64_t rounded = best->config.global_batch();
    if (rounded != global && plan.effective_batch == EffectiveBatchOutcome::kLrRescaled)
      plan.config.train.lr = rescaled_lr(tuned.train.lr, tuned.train.optimizer, global, rounded);
  }
  if (interrupted) plan.interrupted = true;
  plan.stages.push_back(stage);
}

}  // namespace saturate
