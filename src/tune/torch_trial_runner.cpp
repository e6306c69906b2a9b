// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/torch_trial_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/data/loader.h"
#include "saturate/device/device_memory.h"
#include "saturate/distributed/data_parallel.h"
#include "saturate/distributed/process_group.h"
#include "saturate/models/model.h"
#include "saturate/telemetry/console_progress.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/telemetry/throughput.h"
#include "saturate/train/oom_probe.h"
#include "saturate/train/trainer.h"

namespace saturate {
namespace {

// Sets the intra-op threads for one trial and puts the previous count back.
class ThreadScope {
 public:
  explicit ThreadScope(int threads) : saved_(at::get_num_threads()) {
    if (threads > 0) at::set_num_threads(threads);
  }
  ~ThreadScope() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

Measurement measure(const std::vector<StepRecord>& records, int64_t warmup) {
  Measurement m;
  double samples = 0, ms = 0, loss = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const StepRecord& r = records[i];
    m.peak_memory_bytes = std::max(m.peak_memory_bytes, r.peak_memory_bytes);
    loss += r.loss;
    if (static_cast<int64_t>(i) < warmup || r.step_ms <= 0) continue;
    samples += static_cast<double>(r.samples);
    ms += r.step_ms;
    m.step_samples_per_s.push_back(1000.0 * static_cast<double>(r.samples) / r.step_ms);
  }
  if (!records.empty()) m.loss = loss / static_cast<double>(records.size());
  NoiseScale raw, precond;
  for (const StepRecord& r : records) add_step_noise(r, raw, precond);
  m.noise = raw.estimate();
  m.noise_precond = precond.estimate();
  if (!m.step_samples_per_s.empty()) {
    m.samples_per_s = 1000.0 * samples / ms;
    m.phases = mean_phases(records, static_cast<size_t>(std::max<int64_t>(0, warmup)));
    const auto [lo, hi] =
        std::minmax_element(m.step_samples_per_s.begin(), m.step_samples_per_s.end());
    m.spread = (*hi - *lo) / median(m.step_samples_per_s);
  }
  return m;
}

// Under data parallel, what every rank takes from a trial: fits where all fit, the largest
// peak, rank 0's `fields`. Fields travel by name, so a field added on one side cannot shift
// another's meaning. `fields` are this rank's (rank 0's come back); the result is whether every
// rank fit.
bool agree(DistGroup* group, bool fits, int64_t& peak, nlohmann::json& fields) {
  if (group == nullptr) return fits;
  const nlohmann::json mine = {{"fits", fits}, {"peak", peak}, {"fields", fields}};
  const std::vector<std::string> all = group->allgather_bytes(mine.dump());
  bool every = true;
  for (const std::string& bytes : all) {
    const auto j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
    SATURATE_CHECK_RUN(j.is_object(), "tune: a rank sent an unreadable trial outcome");
    every = every && j.value("fits", false);
    peak = std::max(peak, j.value("peak", int64_t{0}));
  }
  fields = nlohmann::json::parse(all[0])["fields"];
  return every;
}

// A number by name; JSON has no NaN (it is written as null), so null reads back as NaN.
double number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>()
                                          : std::numeric_limits<double>::quiet_NaN();
}

nlohmann::json noise_fields(const NoiseScaleEstimate& e) {
  auto n = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  return {n(e.phi), n(e.low), n(e.high), e.steps, e.b_small, e.b_big};
}

NoiseScaleEstimate noise_from_fields(const nlohmann::json& j) {
  NoiseScaleEstimate e;
  if (!j.is_array() || j.size() != 6) return e;
  auto n = [](const nlohmann::json& v) {
    return v.is_number() ? v.get<double>() : std::numeric_limits<double>::infinity();
  };
  e.phi = n(j[0]);  // null: not finite, which for φ and its upper end means unbounded
  e.low = j[1].is_number() ? j[1].get<double>() : std::numeric_limits<double>::quiet_NaN();
  e.high = n(j[2]);
  e.steps = j[3].is_number_integer() ? j[3].get<int64_t>() : 0;
  e.b_small = j[4].is_number() ? j[4].get<double>() : 0;
  e.b_big = j[5].is_number() ? j[5].get<double>() : 0;
  return e;
}

nlohmann::json to_fields(const Measurement& m, int64_t steps_run) {
  const PhaseBreakdown& p = m.phases;
  return {{"samples_per_s", m.samples_per_s},
          {"noise", noise_fields(m.noise)},
          {"noise_precond", noise_fields(m.noise_precond)},
          {"spread", m.spread},
          {"loss", m.loss},
          {"data_wait_ms", p.data_wait_ms},
          {"host_to_device_ms", p.host_to_device_ms},
          {"forward_ms", p.forward_ms},
          {"backward_ms", p.backward_ms},
          {"optimizer_ms", p.optimizer_ms},
          {"communication_ms", p.communication_ms},
          {"other_ms", p.other_ms},
          {"step_ms", p.step_ms},
          {"step_samples_per_s", m.step_samples_per_s},
          {"steps_run", steps_run}};
}

void from_fields(const nlohmann::json& j, Measurement& m, int64_t& steps_run) {
  PhaseBreakdown& p = m.phases;
  m.samples_per_s = number(j, "samples_per_s");
  m.spread = number(j, "spread");
  m.loss = number(j, "loss");
  p.data_wait_ms = number(j, "data_wait_ms");
  p.host_to_device_ms = number(j, "host_to_device_ms");
  p.forward_ms = number(j, "forward_ms");
  p.backward_ms = number(j, "backward_ms");
  p.optimizer_ms = number(j, "optimizer_ms");
  p.communication_ms = number(j, "communication_ms");
  p.other_ms = number(j, "other_ms");
  p.step_ms = number(j, "step_ms");
  m.step_samples_per_s = j.value("step_samples_per_s", std::vector<double>{});
  steps_run = j.value("steps_run", steps_run);
  if (j.contains("noise")) m.noise = noise_from_fields(j["noise"]);
  if (j.contains("noise_precond")) m.noise_precond = noise_from_fields(j["noise_precond"]);
}

}  // namespace

TorchTrialRunner::TorchTrialRunner(std::string model_spec, const TrainingInput& input,
                                   c10::Device device, DeviceMemory& memory, int64_t max_batch)
    : model_spec_(std::move(model_spec)), input_(input), device_(device), memory_(memory) {
  SATURATE_CHECK(input.source && input.source->size() > 0, "tune: the training split of ",
                 input.splits.description, " is empty");
  limit_bytes_ = memory.limit_bytes();
  if (limit_bytes_ <= 0) limit_bytes_ = host_memory_share(1);  // all the host memory free now
  SATURATE_CHECK(limit_bytes_ > 0, "tune: cannot tell how much memory there is; give --memory-limit");
  max_batch_ = std::max<int64_t>(1, std::min(max_batch, input.source->size()));
  eval_.normalize_mean = input.splits.normalize_mean;
  eval_.normalize_std = input.splits.normalize_std;
  eval_.description = input.splits.description;
  eval_.validation = input.splits.validation.size() > 0 ? input.splits.validation
                                                        : input.splits.test;
}

void TorchTrialRunner::set_data_parallel(DistGroup* group) {
  group_ = group;
  if (group_ == nullptr) return;
  const int64_t world = group_->world_size();
  max_batch_ = std::max<int64_t>(1, std::min(max_batch_, (input_.source->size() + world - 1) / world));
}

ProbeResult TorchTrialRunner::fit_fresh(const RunConfig& c, const TrainOptions& o,
                                        MemorySink& sink, TrainSummary* summary,
                                        const std::function<void(Trainer&)>& after_fit) {
  std::unique_ptr<Model> model;
  std::unique_ptr<GradientSync> sync;
  std::unique_ptr<Trainer> trainer;
  // Building the model and optimizer is part of what must fit, and so are the Loader's
  // buffers: the pipeline `train` builds for the same flags.
  // Any other failure (a model that cannot run this configuration) leaves memory as a trial
  // must: the run's tensors freed, then the cache.
  struct Cleanup {
    std::unique_ptr<Model>& model;
    std::unique_ptr<GradientSync>& sync;
    std::unique_ptr<Trainer>& trainer;
    DeviceMemory& memory;
    ~Cleanup() {
      trainer.reset();
      sync.reset();
      model.reset();
      memory.release_cached();
    }
  } cleanup{model, sync, trainer, memory_};
  const ProbeResult p = probe_once(
      [&] {
        seed_everything(o.seed);
        model = make_model(model_spec_, model_inputs_for(input_));
        TrainOptions run = o;
        if (group_) {
          sync = make_data_parallel(*group_);
          run.agree_on_oom = true;
        }
        trainer = std::make_unique<Trainer>(*model, run, device_, &memory_, sync.get());
        {
          LoaderOptions lo = input_.loader_options(o.batch_size, o.seed, c.workers, c.prefetch);
          if (group_) {
            lo.rank = group_->rank();
            lo.world = group_->world_size();
          }
          Loader loader(*input_.source, lo);
          MultiSink sinks;
          sinks.add(&sink);
          if (observer_) sinks.add(observer_);
          if (progress_) {
            progress_->set_label("tune: " + progress_label_);
            sinks.add(progress_);
          }
          const TrainSummary s = trainer->fit(loader, eval_, &sinks);
          if (summary) *summary = s;
        }
        if (after_fit) after_fit(*trainer);
      },
      memory_);
  return p;  // out of the catch block: Cleanup drops the run's tensors, then the cache
}

TrialOutcome TorchTrialRunner::run(const TrialRequest& request) {
  SATURATE_CHECK(request.steps > 0, "tune: a trial needs at least one step");
  const RunConfig& c = request.config;
  ThreadScope threads(c.threads);
  TrainOptions o = c.train;
  // Workers fill the prefetch queue while the first step runs: timed straight after, a short
  // trial of an input-bound pipeline would consume that stock at compute speed and report
  // more than the workers sustain (seen with the next rule: 5663 samples/s in a trial, 4660 in
  // `train`). The stock is drained untimed first.
  const int64_t drain =
      c.workers > 0 && request.steps > request.warmup_steps ? std::max(c.prefetch, 1) : 0;
  const int64_t warmup = request.warmup_steps + drain;
  // W workers deliver batches in rounds of W (one long wait, then W - 1 ready batches): timed
  // steps in whole rounds, or an odd count of a 2-worker pipeline reads high.
  int64_t timed = request.steps - request.warmup_steps;
  if (drain > 0 && timed % c.workers != 0) timed += c.workers - timed % c.workers;
  o.steps = drain > 0 ? warmup + timed : request.steps;
  o.evaluate = false;
  o.timing_warmup_steps = warmup;
  MemorySink sink;
  progress_label_ = "measuring " + c.describe();
  // Failures other than running out of memory end the search: the model cannot train at all.
  ProbeResult p;
  try {
    p = fit_fresh(c, o, sink, nullptr);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    SATURATE_CHECK(false, "tune: ", model_spec_, " cannot run a training step (", c.describe(),
                   "): ", first_line(e.what()));
  }
  TrialOutcome out;
  out.fits = p.outcome == ProbeOutcome::kFits;
  out.steps_run = static_cast<int64_t>(sink.records().size()) + (out.fits ? 0 : 1);
  out.measurement = measure(sink.records(), warmup);
  out.measurement.peak_memory_bytes = std::max(out.measurement.peak_memory_bytes, p.peak_memory_bytes);
  nlohmann::json fields = to_fields(out.measurement, out.steps_run);
  out.fits = agree(group_, out.fits, out.measurement.peak_memory_bytes, fields);
  from_fields(fields, out.measurement, out.steps_run);
  if (group_) {
    // The job's rate: the ranks step together, each on its own samples.
    const double world = group_->world_size();
    out.measurement.samples_per_s *= world;
    for (double& v : out.measurement.step_samples_per_s) v *= world;
  }
  return out;
}

EvalTrial TorchTrialRunner::evaluate(const RunConfig& c, int64_t eval_batch, int64_t batches) {
  SATURATE_CHECK(eval_batch > 0 && batches > 0, "tune: an evaluation needs batches");
  EvalTrial out;
  const TensorDataset& split = eval_.validation;
  if (split.size() == 0) return out;
  out.measured = true;
  ThreadScope threads(c.threads);
  TrainOptions o = c.train;
  o.steps = 1;
  o.evaluate = false;
  o.eval_every = 0;
  o.eval_batch_size = eval_batch;
  o.timing_warmup_steps = 0;
  // The first batch warms up (kernels, allocations); the timed batches follow it.
  auto head = [&](int64_t n) {
    TensorDataset d = split;
    n = std::min(n, split.size());
    d.inputs = split.inputs.narrow(0, 0, n);
    d.targets = split.targets.narrow(0, 0, n);
    return d;
  };
  const TensorDataset warm = head(eval_batch), timed = head(eval_batch * batches);
  double seconds = 0;
  MemorySink sink;
  progress_label_ = "evaluation batch " + std::to_string(eval_batch) + ", " + c.describe();
  const ProbeResult p = fit_fresh(c, o, sink, nullptr, [&](Trainer& trainer) {
    // The evaluation's own peak, on top of what training keeps resident.
    memory_.reset_peak();
    trainer.evaluate(warm, eval_.normalize_mean, eval_.normalize_std);
    const auto start = std::chrono::steady_clock::now();
    const EvalResult r = trainer.evaluate(timed, eval_.normalize_mean, eval_.normalize_std);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out.samples = r.samples;
  });
  out.fits = p.outcome == ProbeOutcome::kFits;
  out.peak_memory_bytes = p.peak_memory_bytes;
  if (out.fits && seconds > 0) out.samples_per_s = static_cast<double>(out.samples) / seconds;
  nlohmann::json fields = {{"samples_per_s", out.samples_per_s}, {"samples", out.samples}};
  out.fits = agree(group_, out.fits, out.peak_memory_bytes, fields);
  out.samples_per_s = number(fields, "samples_per_s");
  out.samples = fields.value("samples", out.samples);
  if (group_) {
    // Each rank scored its shard of the batches: the job evaluated world times as many.
    out.samples_per_s *= group_->world_size();
    out.samples *= group_->world_size();
  }
  return out;
}

QualityRun TorchTrialRunner::train_and_validate(const RunConfig& c, int64_t samples) {
  SATURATE_CHECK(samples > 0, "tune: a quality run needs samples");
  ThreadScope threads(c.threads);
  TrainOptions o = c.train;
  o.steps = std::max<int64_t>(1, (samples + o.batch_size - 1) / o.batch_size);
  o.evaluate = true;
  // The guard judges the run's final validation; evaluations along the way (the user's
  // --eval-every) would cost time its budget did not size.
  o.eval_every = 0;
  o.timing_warmup_steps = 0;
  MemorySink sink;
  TrainSummary s;
  const auto start = std::chrono::steady_clock::now();
  progress_label_ = "quality run, " + c.describe() + ", " + std::to_string(samples) + " samples";
  // Out of memory in a quality run (evaluation included) is a value, as in a trial.
  const ProbeResult p = fit_fresh(c, o, sink, &s);
  QualityRun q;
  q.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  q.peak_memory_bytes = std::max(p.peak_memory_bytes, s.peak_memory_bytes);
  {
    // Rank 0's numbers for every rank (the validation metric is the job's already: each rank
    // scores its shard and the sums are added).
    std::vector<double> losses;
    for (const StepRecord& r : sink.records()) losses.push_back(r.loss);
    nlohmann::json fields = {{"wall_s", q.wall_s},         {"samples", s.samples},
                             {"val_accuracy", s.val_accuracy}, {"val_loss", s.val_loss},
                             {"losses", losses}};
    const bool fits = agree(group_, p.outcome == ProbeOutcome::kFits, q.peak_memory_bytes, fields);
    if (!fits) {
      q.fits = false;
      return q;
    }
    q.wall_s = number(fields, "wall_s");
    s.samples = fields.value("samples", s.samples);
    s.val_accuracy = number(fields, "val_accuracy");
    s.val_loss = number(fields, "val_loss");
    sink = MemorySink();
    for (const auto& loss : fields["losses"]) {
      StepRecord r;
      r.loss = loss.is_number() ? loss.get<double>() : std::numeric_limits<double>::quiet_NaN();
      sink.on_step(r);
    }
  }
  q.samples = s.samples;
  q.validation_metric = std::isnan(s.val_accuracy) ? 0.0 : s.val_accuracy;
  q.validation_loss = std::isnan(s.val_loss) ? 0.0 : s.val_loss;
  if (input_.corpus) {
    // A language model is judged by its validation loss per token (log-perplexity), not by
    // next-token accuracy: negated, so that higher is better as for every metric the guard reads.
    q.metric = "-val_loss";
    q.metric_is_share = false;
    q.validation_metric = std::isnan(s.val_loss) ? -std::numeric_limits<double>::infinity()
                                                 : -s.val_loss;
  }
  for (const StepRecord& r : sink.records()) q.losses.push_back(r.loss);
  // The mean over the last fifth of the steps: runs of different batch sizes see the same
  // samples in different numbers of steps, so a fixed step count would not compare.
  const size_t tail = std::max<size_t>(1, q.losses.size() / 5);
  double sum = 0;
  for (size_t i = q.losses.size() - std::min(tail, q.losses.size()); i < q.losses.size(); ++i)
    sum += q.losses[i];
  q.final_loss = q.losses.empty() ? 0.0 : sum / static_cast<double>(std::min(tail, q.losses.size()));
  return q;
}

}  // namespace saturate
