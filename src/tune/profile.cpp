// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "saturate/core/error.h"
#include "saturate/core/log.h"
#include "saturate/data/loader.h"
#include "saturate/data/training_input.h"
#include "saturate/device/device_memory.h"
#include "saturate/distributed/process_group.h"
#include "saturate/models/model.h"
#include "saturate/telemetry/proc_stats.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/train/oom_probe.h"
#include "saturate/train/trainer.h"

namespace saturate {
namespace {

// The configuration half of the profile: what ran, before anything is measured.
Profile describe_run(const ProfileOptions& options, const ProfileJob& job) {
  Profile p;
  p.data = options.data_spec;
  p.device = job.device;
  p.probe = job.probe;
  p.threads = options.threads;
  p.local_ranks = job.dist.local_world_size;
  p.workers = options.workers;
  p.prefetch = loader_batches_ahead(options.prefetch, options.workers);  // what the Loader makes
  p.train = options.train;
  p.memory_limit_bytes = options.memory_limit_bytes;
  p.window_steps = options.window_steps;
  return p;
}

// The profiled run on job.loader, with device readings at both ends and in between: readings
// at both ends bracket the run, so even a run shorter than one interval has an energy
// difference and a CPU utilisation.
void train_and_sample(const ProfileOptions& options, ProfileJob& job, Model& model,
                      DeviceMemory* memory, Profile& p, double& train_wall_s) {
  MultiSink sinks;
  MemorySink records;
  sinks.add(&records);
  if (job.sink) sinks.add(job.sink);
  Trainer trainer(model, p.train, job.device, memory, job.sync);
  DeviceSampler sampler(options.sampler);
  std::vector<DeviceSample> readings = {sampler.sample_now()};
  sampler.start();
  SampledSink sampled(sampler, sinks);  // the readings reach job.sink too
  TrainSummary summary;
  try {
    summary = trainer.fit(job.loader, job.input.splits, &sampled, job.stop);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (!job.dist.is_distributed() || !job.on_collective_failure) throw;
    job.on_collective_failure(e);
    throw;
  }
  sampler.stop();
  if (job.after_run) job.after_run();
  for (const auto& d : sampler.samples()) readings.push_back(d);
  readings.push_back(sampler.sample_now());
  p.device_samples = summarize_samples(readings, summary.samples);
  p.gpu_status = sampler.gpu_status();
  p.records = records.records();
  p.throughput = steady_throughput(p.records, p.train.timing_warmup_steps, p.window_steps);
  p.steps = summary.steps;
  p.is_interrupted = summary.is_interrupted;
  p.phases = summary.phases;
  p.peak_memory_bytes = summary.peak_memory_bytes;
  p.noise = summary.noise;
  p.noise_precond = summary.noise_precond;
  train_wall_s = summary.train_wall_s;
}

// Data parallel: each rank's busy time per step (the step less its wait for the all-reduce) is
// what tells the ranks apart; every rank gathers them all.
std::vector<RankTimes> gather_rank_times(const PhaseBreakdown& ph, DistGroup* group) {
  const std::vector<double> mine = {ph.step_ms, ph.step_ms - ph.communication_ms,
                                    ph.communication_ms, ph.data_wait_ms};
  const std::vector<std::vector<double>> all =
      group ? group->allgather(mine) : std::vector<std::vector<double>>{mine};
  std::vector<RankTimes> ranks;
  for (const auto& r : all) ranks.push_back(RankTimes{r[0], r[1], r[2], r[3]});
  return ranks;
}

// Scaling efficiency: the job against world × one process of the same per-rank batch and
// threads, measured here by rank 0 alone (the other ranks idle at a barrier) on the same steps.
void measure_one_process(const ProfileOptions& options, ProfileJob& job, DeviceMemory& memory,
                         double train_wall_s, Profile& p) {
  const TrainOptions& opts = p.train;
  if (job.dist.rank == 0) {
    SATURATE_LOG_INFO("profile: scaling: rank 0 alone for ", opts.steps,
                      " steps while the other ranks wait");
    MemorySink alone;
    const TrainingInput& input = job.input;
    const ProbeResult r = probe_once(
        [&] {
          seed_everything(opts.seed);
          auto single = make_model(options.model, model_inputs_for(input));
          Trainer t(*single, opts, job.device, &memory, nullptr);
          Loader l(*input.source, input.loader_options(opts.batch_size, opts.seed,
                                                       options.workers, options.prefetch));
          t.fit(l, input.splits, &alone, job.stop);
        },
        memory);
    if (r.outcome == ProbeOutcome::kFits)
      p.one_process_samples_per_s =
          steady_throughput(alone.records(), opts.timing_warmup_steps, p.window_steps)
              .samples_per_s;
    else
      p.one_process_why = "out of memory beside the data-parallel run's state";
  }
  // The other ranks idle meanwhile, for about as long as the run they just made together:
  // not inside a collective bounded by --dist-timeout (a long profile failed there).
  const auto expected = std::chrono::seconds(120 + static_cast<int64_t>(10 * train_wall_s));
  job.group->wait_for_rank0(
      "profile scaling run",
      std::max(job.group->timeout(),
               std::chrono::duration_cast<std::chrono::milliseconds>(expected)));
  job.group->barrier();
}

// Training FLOPs ≈ 3 × forward (backward computes gradients for inputs and weights). The
// reference peak: on CPU the measured GEMM rate of this machine (what its BLAS can do), in the
// precision the run's matmuls use: a bf16 run against the fp32 peak read as 86% of a peak it
// never aimed at. The fp32 rate also feeds the slow-BLAS rule.
void measure_compute(int64_t forward_flops_per_sample, Profile& p) {
  p.train_flops_per_sample = 3.0 * static_cast<double>(forward_flops_per_sample);
  p.achieved_flops_per_s = p.train_flops_per_sample * p.throughput.samples_per_s;
  const bool cpu = p.device.is_cpu();
  p.gemm_peak_flops = cpu ? measure_gemm_gflops(512, 5) * 1e9 : 0.0;
  const bool bf16_peak = p.train.precision == Precision::kBf16;
  const bool fp16_peak = p.train.precision == Precision::kFp16 && !cpu;
  p.mfu_peak_precision = bf16_peak ? "bf16" : fp16_peak ? "fp16" : "fp32";
  if (cpu) {
    p.mfu_peak_flops = bf16_peak ? measure_gemm_gflops(512, 5, c10::ScalarType::BFloat16) * 1e9
                                 : p.gemm_peak_flops;
  } else if (p.device.is_cuda()) {
    // A GPU's own tensor-core GEMM in the run's matmul precision (8192², where it peaks).
    const c10::ScalarType t = bf16_peak ? c10::ScalarType::BFloat16
                              : fp16_peak ? c10::ScalarType::Half
                                          : c10::ScalarType::Float;
    p.mfu_peak_flops = measure_gemm_gflops(8192, 5, t, p.device) * 1e9;
  }
  p.mfu_pct = p.mfu_peak_flops > 0 && p.train_flops_per_sample > 0
                  ? 100.0 * p.achieved_flops_per_s / p.mfu_peak_flops
                  : std::nan("");
}

// What a page fault costs here prices the faults the steady steps took (allocation churn).
void measure_host_memory(Profile& p) {
  p.page_fault_cost = measure_page_fault_cost();
  p.cpu_cache = cpu_cache_enabled();
  p.page_faults_per_step =
      mean_page_faults(p.records, static_cast<size_t>(p.train.timing_warmup_steps));
  p.cpu_cache_stats = cpu_budget_stats();
}

}  // namespace

double Profile::job_samples_per_s() const {
  return throughput.samples_per_s * static_cast<double>(ranks.size());
}

double Profile::scaling_efficiency() const {
  if (one_process_samples_per_s <= 0) return std::nan("");
  return job_samples_per_s() / (static_cast<double>(ranks.size()) * one_process_samples_per_s);
}

Profile run_profile_job(const ProfileOptions& options, ProfileJob& job) {
  SATURATE_CHECK(options.window_steps > 0, "profile: window_steps must be positive, got ",
                 options.window_steps);
  Profile p = describe_run(options, job);
  p.train.evaluate = false;
  auto memory = make_device_memory(job.device, options.memory_limit_bytes);
  seed_everything(p.train.seed);
  auto model = make_model(options.model, model_inputs_for(job.input));
  p.model = model->name();
  double train_wall_s = 0;
  train_and_sample(options, job, *model, memory.get(), p, train_wall_s);
  p.ranks = gather_rank_times(p.phases, job.group);
  if (job.group && options.measure_scaling && !p.is_interrupted)
    measure_one_process(options, job, *memory, train_wall_s, p);
  if (job.dist.rank != 0) return p;  // rank 0 measures the job
  p.tokens_per_sample = job.input.tokens_per_sample();
  p.attention_kernel = model->attention_kernel();
  measure_compute(model->forward_flops_per_sample(), p);
  measure_host_memory(p);
  return p;
}

LoaderProfile run_loader_profile(Loader& loader, int64_t batches, const std::string& data,
                                 int threads, const std::atomic<bool>* stop) {
  const ProcStat cpu0 = read_proc_stat();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t samples = 0, done = 0, epoch = 0;
  loader.start_epoch(epoch);
  while (done < batches && !(stop && stop->load())) {
    std::optional<Batch> b = loader.next();
    if (!b) {
      loader.start_epoch(++epoch);
      continue;
    }
    samples += b->size;
    ++done;
  }
  LoaderProfile p;
  p.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  p.cpu_util_pct = cpu_util_between(cpu0, read_proc_stat()).util_pct;
  const LoaderStats st = loader.stats();
  const LoaderOptions& o = loader.options();
  p.data = data;
  p.threads = threads;
  p.batch_size = o.batch_size;
  p.workers = o.workers;
  p.prefetch = o.batches_ahead();  // what the Loader made ahead, not the flag's value
  p.batches = done;
  p.samples_per_s = p.wall_s > 0 ? static_cast<double>(samples) / p.wall_s : 0.0;
  const double n = static_cast<double>(done);
  p.make_batch_ms = done ? 1000.0 * st.worker_busy_s / n : 0.0;
  p.wait_ms = done ? 1000.0 * st.wait_s / n : 0.0;
  p.cache_hit_rate = st.cache_hit_rate();
  p.is_interrupted = stop && stop->load();
  return p;
}

}  // namespace saturate
