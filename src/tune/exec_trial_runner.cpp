// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/exec_trial_runner.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "saturate/core/error.h"
#include "saturate/core/temp_folder.h"
#include "saturate/core/units.h"
#include "saturate/device/device_memory.h"
#include "saturate/telemetry/throughput.h"

namespace saturate {
namespace {

constexpr const char* kComponent = "exec";

// Rank 0's lines (or the unranked ones), in order.
std::vector<ExecStep> rank0(const std::vector<ExecStep>& steps) {
  std::vector<ExecStep> v;
  for (const ExecStep& s : steps)
    if (s.rank == 0) v.push_back(s);
  return v;
}

// The mean of the finite values among the last quarter of `losses` (at least the last one);
// NaN when none is finite.
double tail_mean(const std::vector<double>& losses) {
  const size_t n = losses.size(), from = n - std::min<size_t>(n, std::max<size_t>(1, n / 4));
  double sum = 0;
  int64_t count = 0;
  for (size_t i = from; i < n; ++i)
    if (std::isfinite(losses[i])) sum += losses[i], ++count;
  return count > 0 ? sum / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

Measurement measure_exec_steps(const std::vector<ExecStep>& all, int64_t warmup_steps,
                               int world_size) {
  Measurement m;
  const std::vector<ExecStep> steps = rank0(all);
  const double world = std::max(1, world_size);
  double loss_sum = 0;
  int64_t losses = 0;
  for (const ExecStep& s : all) {
    m.peak_memory_bytes = std::max(m.peak_memory_bytes, s.peak_memory_bytes);
    if (std::isfinite(s.loss)) loss_sum += s.loss, ++losses;
  }
  m.loss = losses > 0 ? loss_sum / static_cast<double>(losses)
                      : std::numeric_limits<double>::quiet_NaN();
  const size_t n = steps.size();
  if (n < 2) return m;
  // The first timed step needs the end of the step before it as its start.
  const size_t first = static_cast<size_t>(std::clamp<int64_t>(warmup_steps, 1,
                                                               static_cast<int64_t>(n) - 1));
  double samples = 0, wait_s = 0;
  bool wait_known = false;
  for (size_t i = first; i < n; ++i) {
    const double dt = steps[i].t - steps[i - 1].t;
    samples += static_cast<double>(steps[i].samples) * world;
    if (dt > 0) m.step_samples_per_s.push_back(static_cast<double>(steps[i].samples) * world / dt);
    if (steps[i].data_wait_s >= 0) wait_s += steps[i].data_wait_s, wait_known = true;
  }
  const double span = steps[n - 1].t - steps[first - 1].t;
  const double timed = static_cast<double>(n - first);
  if (span > 0) m.samples_per_s = samples / span;
  m.phases.step_ms = 1000 * span / timed;
  m.phases.data_wait_ms = wait_known ? std::min(m.phases.step_ms, 1000 * wait_s / timed) : 0;
  m.phases.other_ms = m.phases.step_ms - m.phases.data_wait_ms;
  if (!m.step_samples_per_s.empty()) {
    const auto [lo, hi] = std::minmax_element(m.step_samples_per_s.begin(),
                                              m.step_samples_per_s.end());
    const double mid = median(m.step_samples_per_s);
    m.spread = mid > 0 ? (*hi - *lo) / mid : 0;
  }
  return m;
}

std::vector<StepRecord> exec_step_records(const std::vector<ExecStep>& all, double started_unix_s,
                                          int world_size) {
  std::vector<StepRecord> records;
  double previous = started_unix_s;
  for (const ExecStep& s : rank0(all)) {
    StepRecord r;
    r.step = static_cast<int64_t>(records.size());
    r.samples = s.samples * std::max(1, world_size);
    r.start_ms = 1000 * (previous - started_unix_s);
    r.step_ms = std::max(0.0, 1000 * (s.t - previous));
    r.data_wait_ms = s.data_wait_s >= 0 ? std::min(r.step_ms, 1000 * s.data_wait_s) : 0;
    r.other_ms = r.step_ms - r.data_wait_ms;
    r.loss = s.loss;
    r.peak_memory_bytes = s.peak_memory_bytes;
    records.push_back(r);
    previous = s.t;
  }
  return records;
}

ExecQuality exec_quality(const ExecRun& run) {
  ExecQuality q;
  for (auto it = run.evals.rbegin(); it != run.evals.rend(); ++it) {
    if (it->rank != 0) continue;
    q.from_eval = true;
    q.metric = it->higher_is_better ? it->name : "-" + it->name;
    q.value = it->higher_is_better ? it->value : -it->value;
    return q;
  }
  // No evaluation: the mean training loss over the last quarter of the steps.
  std::vector<double> losses;
  for (const ExecStep& s : rank0(run.steps)) losses.push_back(s.loss);
  q.metric = "-train_loss (no eval lines: the loss curve)";
  q.value = -tail_mean(losses);
  return q;
}

ExecTrialRunner::ExecTrialRunner(ExecRunnerOptions options)
    : o_(std::move(options)), nvml_(std::make_shared<const Nvml>()) {
  SATURATE_CHECK(!o_.work_dir.empty(), kComponent, ": no folder for the runs");
}

int64_t ExecTrialRunner::memory_limit_bytes() const {
  return o_.memory_limit_bytes > 0 ? o_.memory_limit_bytes : host_memory_share(1);
}

ExecRun ExecTrialRunner::launch(const ExecSettings& settings, const std::string& purpose,
                                int64_t stop_after) {
  const int index = ++runs_;
  const std::string dir = o_.work_dir + "/run-" + std::to_string(index);
  SATURATE_CHECK_RUN(::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, kComponent,
                     ": cannot make ", dir, ": ", std::strerror(errno));
  ExecLaunch l;
  l.argv = exec_argv(o_.command, settings);
  l.env = exec_environment(o_.command, settings, std::to_string(index), dir);
  l.run_dir = dir;
  l.metrics_path = exec_metrics_path(o_.command, dir);
  l.memory_limit_bytes = o_.memory_limit_bytes;
  const bool on_device = o_.device_memory_limit && o_.memory_limit_bytes > 0;
  if (on_device) {
    l.env.emplace_back("SATURATE_DEVICE_MEMORY_LIMIT_BYTES", std::to_string(o_.memory_limit_bytes));
    l.memory_limit_bytes = 0;  // the GPU's memory is the limit, not the host's
  }
  l.wall_limit_s = o_.wall_limit_s;
  l.no_progress_s = o_.no_progress_s;
  l.startup_limit_s = o_.startup_limit_s;
  l.stop_after_steps = stop_after;
  l.grace_s = 3;
  l.stop = o_.stop;
  l.nvml = nvml_.get();
  ExecRun run = run_exec(l);
  if (on_device)
    run.memory_limit_how = "CUDA allocator capped per process (SATURATE_DEVICE_MEMORY_LIMIT_BYTES: "
                           "saturate_client calls torch.cuda.set_per_process_memory_fraction)";
  if (o_.on_run) o_.on_run(purpose, settings, run);
  if (!o_.keep_runs) remove_tree(dir);
  const std::string output = o_.keep_runs ? "its output: " + run.stderr_path
                                          : "--runs-dir DIR keeps its output";
  if (run.steps.size() >= 2 && run.outcome.status == ExecStatus::kOk) {
    const double steps_s = run.steps.back().t - run.steps.front().t;
    overhead_s_ += std::max(0.0, run.wall_s - steps_s);
    ++overhead_runs_;
  }
  const std::string which = "run " + std::to_string(index) + " (" + purpose + ")";
  // A program that never reports a step does not speak the protocol: bad input, exit 2.
  SATURATE_CHECK(!run.steps.empty() || run.outcome.status == ExecStatus::kOom ||
                     run.stopped == ExecStopReason::kInterrupted ||
                     (run.outcome.status == ExecStatus::kError &&
                      run.stopped == ExecStopReason::kNone),
                 kComponent, ": ", which, ": ",
                 run.stopped == ExecStopReason::kNone ? "the program exited without reporting a step"
                                                      : run.outcome.reason,
                 "; it must write the exec protocol's lines (saturate_client, or the zero-change "
                 "hook for a Python script that steps a torch optimizer); ", output);
  SATURATE_CHECK_RUN(run.outcome.status != ExecStatus::kError ||
                         run.stopped == ExecStopReason::kInterrupted,
                     kComponent, ": ", which, " failed: ", run.outcome.reason, " (", output,
                     ")");
  return run;
}

ExecRun ExecTrialRunner::run_as_given(const ExecSettings& settings, const std::string& purpose) {
  const auto max = settings.find("max_steps");
  const int64_t stop_after = max == settings.end() ? 0 : std::stoll(max->second);
  ExecRun run = launch(settings, purpose, stop_after);
  SATURATE_CHECK_RUN(run.outcome.status != ExecStatus::kOom, kComponent, ": ", purpose,
                     ": the program runs out of memory with its own settings: ",
                     run.outcome.reason);
  return run;
}

TrialOutcome ExecTrialRunner::run(const TrialRequest& request) {
  const ExecSettings settings = settings_for(request.config, request.steps);
  const ExecRun r = launch(settings, "trial: " + request.config.describe(), request.steps);
  TrialOutcome t;
  t.steps_run = static_cast<int64_t>(r.steps.size());
  if (r.outcome.status == ExecStatus::kOom) {
    t.steps_run += 1;  // the step it failed in
    return t;
  }
  t.fits = true;
  if (r.stopped == ExecStopReason::kInterrupted) return t;  // the tuner stops at its next check
  t.measurement = measure_exec_steps(r.steps, request.warmup_steps, o_.world_size);
  // Without a reported peak: the GPU memory NVML saw its processes hold, else (CPU) their
  // resident memory.
  if (t.measurement.peak_memory_bytes == 0)
    t.measurement.peak_memory_bytes =
        o_.device_memory_limit && r.peak_gpu_memory_bytes > 0 ? r.peak_gpu_memory_bytes
                                                              : r.peak_rss_bytes;
  return t;
}

QualityRun ExecTrialRunner::train_and_validate(const RunConfig& config, int64_t samples) {
  const int64_t per_step = std::max<int64_t>(1, config.train.batch_size * o_.world_size);
  const int64_t steps = std::max<int64_t>(1, (samples + per_step - 1) / per_step);
  // No stop after the steps: the program evaluates after its last one.
  const ExecRun r = launch(settings_for(config, steps), "quality: " + config.describe(), 0);
  QualityRun q;
  q.fits = r.outcome.status != ExecStatus::kOom;
  q.wall_s = r.wall_s;
  for (const ExecStep& s : r.steps)
    if (s.rank == 0) q.samples += s.samples * o_.world_size, q.losses.push_back(s.loss);
  const Measurement m = measure_exec_steps(r.steps, 1, o_.world_size);
  q.peak_memory_bytes = m.peak_memory_bytes > 0 ? m.peak_memory_bytes : r.peak_rss_bytes;
  const ExecQuality eq = exec_quality(r);
  q.metric = eq.metric;
  q.metric_is_share = false;
  q.validation_metric = eq.value;
  q.final_loss = tail_mean(q.losses);
  return q;
}

}  // namespace saturate
