// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/baselines.h"

#include <algorithm>
#include <utility>

#include "saturate/core/error.h"

namespace saturate {
namespace {

// Runs the trials of one strategy and keeps its account. A trial is steps_per_trial plain
// training steps of the candidate (accumulation 1, nothing untimed): the baselines only ask
// "did it run out of memory", and neither Lightning nor Accelerate measures throughput.
class TrialLog {
 public:
  TrialLog(TrialRunner& runner, const RunConfig& base, int64_t steps, std::string strategy)
      : runner_(runner), base_(base), steps_(steps) {
    result_.strategy = std::move(strategy);
  }

  bool fits(int64_t batch, const char* purpose) {
    TrialRequest request;
    request.config = base_;
    request.config.train.batch_size = batch;
    request.config.train.accumulate = 1;
    request.steps = steps_;
    request.warmup_steps = 0;
    const TrialOutcome outcome = runner_.run(request);
    result_.steps += outcome.steps_run;
    result_.ooms += outcome.fits ? 0 : 1;
    result_.trials.push_back(SearchTrial{purpose, request.config, outcome});
    return outcome.fits;
  }

  BaselineResult finish(int64_t chosen) {
    result_.chosen = std::max<int64_t>(chosen, 0);
    return std::move(result_);
  }

 private:
  TrialRunner& runner_;
  const RunConfig& base_;
  int64_t steps_;
  BaselineResult result_;
};

void check_options(const LightningOptions& o, const TrialRunner& runner) {
  SATURATE_CHECK(o.init_val >= 1, "tune: lightning init_val must be >= 1, got ", o.init_val);
  SATURATE_CHECK(o.steps_per_trial >= 1, "tune: lightning steps_per_trial must be >= 1, got ",
                 o.steps_per_trial);
  SATURATE_CHECK(o.max_trials >= 1, "tune: lightning max_trials must be >= 1, got ", o.max_trials);
  SATURATE_CHECK(o.margin >= 0.0 && o.margin < 1.0,
                 "tune: lightning margin must be in [0, 1), got ", o.margin);
  SATURATE_CHECK(o.max_val >= 1, "tune: lightning max_val must be >= 1, got ", o.max_val);
  SATURATE_CHECK(runner.max_batch_size() >= 1,
                 "tune: the runner's max_batch_size must be >= 1, got ", runner.max_batch_size());
}

}  // namespace

BaselineResult lightning_power(TrialRunner& runner, const RunConfig& base,
                               const LightningOptions& options) {
  check_options(options, runner);
  TrialLog log(runner, base, options.steps_per_trial, "lightning-power");
  const int64_t cap = runner.max_batch_size();
  int64_t batch = std::min(options.init_val, cap);
  int64_t last_ok = 0;
  bool any_success = false;
  const char* purpose = "start";
  // Lightning's `for i in range(max_trials)`: here every trial counts, failures included.
  for (int i = 0; i < options.max_trials; ++i) {
    // Lightning stops when the candidate reaches max_val and returns it without trying it.
    if (batch >= options.max_val) {
      batch = options.max_val;
      break;
    }
    // Halved to 0: not even batch 1 fits. Lightning would go on to try 0; we report "none".
    if (batch < 1) break;
    if (log.fits(batch, purpose)) {
      last_ok = batch;
      if (i + 1 >= options.max_trials) break;  // out of trials: keep the size that fit
      // The cap stands in for Lightning's dataset-length check: an unchanged size ends it.
      const int64_t next = std::min(batch * 2, cap);
      if (next == batch) break;
      batch = next;
      any_success = true;
      purpose = "double";
    } else {
      // After a success Lightning halves the failing size, which is the last size that fit;
      // after a step capped at max_batch_size() it is not, so return the last fit directly.
      // Before any success the start was too large and halving goes on. No margin here.
      if (any_success) {
        batch = last_ok;
        break;
      }
      batch /= 2;  // int(batch * 0.5)
      purpose = "halve";
    }
  }
  return log.finish(batch);
}

BaselineResult lightning_binsearch(TrialRunner& runner, const RunConfig& base,
                                   const LightningOptions& options) {
  check_options(options, runner);
  TrialLog log(runner, base, options.steps_per_trial, "lightning-binsearch");
  const int64_t cap = runner.max_batch_size();
  int64_t batch = std::min(options.init_val, cap);
  // Lightning starts with low = 1 as if batch 1 were known to fit: a first-trial failure
  // bisects towards it and may return 1 untried.
  int64_t low = 1;
  int64_t high = 0;  // the smallest size that ran out of memory; 0 while none has
  int successes = 0;
  const char* purpose = "start";
  for (;;) {
    if (batch >= options.max_val) {
      batch = options.max_val;
      break;
    }
    if (log.fits(batch, purpose)) {
      if (++successes >= options.max_trials) break;  // max_trials counts successes only
      low = batch;
      int64_t next = 0;
      if (high > 0) {
        if (high - low <= 1) break;
        next = (high + low) / 2;
        purpose = "bisect";
      } else {
        next = std::min(batch * 2, cap);
        purpose = "double";
      }
      if (next == batch) break;  // at the cap (Lightning: the dataset length)
      batch = next;
    } else {
      high = batch;
      batch = (high + low) / 2;
      purpose = "bisect";
      if (high - low <= 1) break;  // batch is now low: the last size that fit (or the assumed 1)
    }
  }
  const auto kept = static_cast<int64_t>(static_cast<double>(batch) * (1.0 - options.margin));
  return log.finish(std::max<int64_t>(1, kept));
}

BaselineResult accelerate_shrink(TrialRunner& runner, const RunConfig& base,
                                 const AccelerateOptions& options) {
  SATURATE_CHECK(options.starting_batch_size >= 1,
                 "tune: accelerate starting_batch_size must be >= 1, got ",
                 options.starting_batch_size);
  SATURATE_CHECK(options.steps_per_trial >= 1,
                 "tune: accelerate steps_per_trial must be >= 1, got ", options.steps_per_trial);
  TrialLog log(runner, base, options.steps_per_trial, "accelerate-shrink");
  int64_t batch = std::min(options.starting_batch_size, runner.max_batch_size());
  const char* purpose = "start";
  // One trial stands in for one call of the wrapped function. In Accelerate that call is
  // usually the whole training loop, rerun from the start after each out-of-memory, so the
  // real cost of a failure is whatever ran before it, not steps_per_trial steps.
  while (batch > 0) {  // Accelerate raises "reached zero"; we return chosen = 0
    if (log.fits(batch, purpose)) return log.finish(batch);
    batch = static_cast<int64_t>(static_cast<double>(batch) * 0.9);  // PR #3684's ×0.9
    purpose = "shrink";
  }
  return log.finish(0);
}

}  // namespace saturate
