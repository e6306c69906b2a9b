// SPDX-License-Identifier: Apache-2.0
// The tuner walks a table of stages. Each stage is one file under src/tune/stages/ and shares
// what it needs through TuneState (stages/tune_state.h); adding a stage is one file and one row.
#include "saturate/tune/tuner.h"

#include "saturate/core/units.h"
#include "stages/tune_state.h"

namespace saturate {
namespace {

using tune_detail::TuneState;

struct Stage {
  const char* name;
  bool (*enabled)(const TuneOptions& o);
  void (*run)(TuneState& s);
  /// May be skipped once the search's share of the budget is spent (the guard and the
  /// confirmation always run: they are what the budget's rest is for).
  bool optional;
};

bool always(const TuneOptions&) { return true; }

const Stage kStages[] = {
    {"check", always, tune_detail::check, false},
    {"baseline", always, tune_detail::baseline, false},
    {"precision", [](const TuneOptions& o) { return !o.precisions.empty(); },
     tune_detail::precision, true},
    {"memory_format", [](const TuneOptions& o) { return !o.memory_formats.empty(); },
     tune_detail::memory_format, true},
    {"batch_size", always, tune_detail::batch_size, true},
    {"memory_savers", [](const TuneOptions& o) { return o.max_recompute_segments >= 2; },
     tune_detail::memory_savers, true},
    {"input_pipeline", [](const TuneOptions& o) { return o.max_workers > 0; },
     tune_detail::input_pipeline, true},
    {"threads", [](const TuneOptions& o) { return !o.threads.empty(); }, tune_detail::threads,
     true},
    {"eval_batch", [](const TuneOptions& o) { return o.eval_batch_stage; },
     tune_detail::eval_batch, true},
    {"quality_guard", always, tune_detail::quality_guard, false},
    {"confirm", always, tune_detail::confirm, false},
};

// An interrupted tune's plan keeps what leaves the optimisation as it was (precision, layout,
// threads, input pipeline, memory savers); a batch or learning-rate change that no quality
// guard accepted goes back to the user's. Returns what was undone, in words ("" when nothing).
std::string keep_only_guarded(TuneState& s) {
  if (s.plan.quality.status == QualityStatus::kAccepted) return "";
  const RunConfig ref = s.reference();
  RunConfig c = s.current;
  if (c.train.batch_size == ref.train.batch_size && c.train.lr == ref.train.lr) return "";
  const std::string was = c.describe() + ", lr " + format_fixed(c.train.lr, 6);
  c.train.batch_size = ref.train.batch_size;
  c.train.lr = ref.train.lr;
  c.train.accumulate = ref.train.accumulate;
  c.train.warmup_steps = ref.train.warmup_steps;
  const std::string now = c.describe() + ", lr " + format_fixed(c.train.lr, 6);
  const std::string why = "interrupted before the quality guard checked " + was +
                          ": the plan keeps " + now;
  s.set_effective_batch(c.train.accumulate > 1 ? EffectiveBatchOutcome::kKept
                                               : EffectiveBatchOutcome::kUnchanged,
                        why);
  s.plan.goodput.keep_user_batch();
  // Its own measurement when a stage took one; else none (the plan says samples/s unknown).
  s.adopt(c, s.cached(c));
  return why;
}

}  // namespace

std::vector<std::string> tune_stage_names() {
  std::vector<std::string> names;
  for (const Stage& stage : kStages) names.emplace_back(stage.name);
  return names;
}

Plan tune(TrialRunner& runner, const RunConfig& base, const TuneOptions& options,
          const std::function<void(const PlanStage&)>& on_stage) {
  TuneState s(runner, base, options, on_stage);
  try {
    for (const Stage& stage : kStages) {
      if (!stage.enabled(s.o)) continue;
      if (stage.optional && s.skip_over_budget(stage.name)) continue;
      stage.run(s);
    }
  } catch (const tune_detail::DoesNotFit& e) {
    s.plan.one_process_does_not_fit = true;
    // The user's configuration, for the ranks stage to split. Its evaluation was not measured:
    // in batches no larger than the training batch, which the split holds.
    s.current = s.base;
    TrainOptions& t = s.current.train;
    const bool smaller = t.eval_batch_size > t.batch_size;
    if (smaller) t.eval_batch_size = t.batch_size;
    s.plan.quality.status = QualityStatus::kNotRun;
    s.plan.quality.why = "not run: one process cannot hold the model";
    s.finish_stage("check", 0, 0, smaller,
                   e.why + (smaller ? "; evaluation in batches of the training batch, " +
                                          std::to_string(t.batch_size) + " (not measured)"
                                    : std::string()));
  } catch (const tune_detail::Interrupted&) {
    s.plan.interrupted = true;
    s.plan.quality.status = QualityStatus::kNotRun;
    s.plan.quality.why = "not run: interrupted";
    const double before = TuneState::sps(s.current_out);
    const std::string undone = keep_only_guarded(s);
    s.finish_stage("interrupted", before, TuneState::sps(s.current_out), !undone.empty(),
                   "stopped at a trial boundary (Ctrl-C); the plan holds the stages so far" +
                       (undone.empty() ? std::string() : "; " + undone + " (the batch and "
                                                         "learning rate no guard saw stay out)"));
  }
  return s.finish();
}

}  // namespace saturate
