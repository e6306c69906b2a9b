// SPDX-License-Identifier: Apache-2.0
#pragma once
// Profile: what N training steps of a config measured — where each step's time goes, the
// steady throughput, compute (FLOPs, MFU), memory, device readings and, under data parallel,
// every rank's share and the scaling efficiency. Plain data: diagnose(profile_facts(p)) reads
// the findings off it and report/profile_report.h prints it; `saturate profile` only picks.
//
//   ProfileOptions opts;  opts.train.steps = 50;  opts.model = "mlp";  opts.data_spec = spec;
//   ProfileJob job(input, loader, c10::Device(c10::kCPU), probe);
//   const Profile p = run_profile_job(opts, job);
//   write_profile_table(std::cout, p, diagnose(profile_facts(p)));

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/Device.h>

#include "saturate/device/cpu_budget.h"
#include "saturate/device/probe.h"
#include "saturate/distributed/dist_env.h"
#include "saturate/telemetry/device_sampler.h"
#include "saturate/telemetry/noise_scale.h"
#include "saturate/telemetry/sample_summary.h"
#include "saturate/telemetry/step_record.h"
#include "saturate/telemetry/throughput.h"
#include "saturate/train/train_options.h"

namespace saturate {

class DistGroup;
class GradientSync;
class Loader;
class TelemetrySink;
struct TrainingInput;

/// What to profile and how to measure it. The data, device and process group are ProfileJob's.
struct ProfileOptions {
  /// The run's options: steps (0: train.epochs), timing_warmup_steps (the steps left out of
  /// every timing), the batch and precision. A profile never evaluates (`evaluate` is ignored).
  TrainOptions train;
  std::string model = "fmnist-cnn";  ///< a make_model() spec
  std::string data_spec;             ///< what the report names as the data
  int threads = 0;                   ///< this process's intra-op threads (reported)
  int workers = 0;                   ///< the loader's, for the one-process run and the report
  int prefetch = 2;
  int64_t memory_limit_bytes = 0;    ///< device memory budget; 0: the device's own
  int64_t window_steps = 10;         ///< steps per throughput window
  SamplerOptions sampler;            ///< device readings during the run
  /// Data parallel: rank 0 also runs the same steps alone (the others wait) for the scaling
  /// efficiency.
  bool measure_scaling = true;
};

/// What a profile runs on, resolved by the caller; everything referenced must outlive the call.
struct ProfileJob {
  ProfileJob(const TrainingInput& input, Loader& loader, c10::Device device, DeviceProbe probe)
      : input(input), loader(loader), device(device), probe(std::move(probe)) {}

  const TrainingInput& input;  ///< the splits, the model's input, the one-process run's source
  Loader& loader;              ///< this rank's training batches (sharded under data parallel)
  c10::Device device;          ///< this rank's
  DeviceProbe probe;             ///< what the report and the diagnosis say of the machine
  DistEnv dist;                 ///< one process unless a launcher started this one as a rank
  DistGroup* group = nullptr;   ///< joined, when dist.is_distributed()
  GradientSync* sync = nullptr;
  TelemetrySink* sink = nullptr;  ///< also gets every step and device reading (may be null)
  /// Called by every rank once the training run ended, before the ranks exchange their times
  /// (collectives allowed): where per-rank sinks are gathered.
  std::function<void()> after_run;
  /// Data parallel: called with what the training run threw (other than saturate::Error),
  /// almost always a collective that failed because another rank stopped; it should throw the
  /// error to report. Without it the exception propagates unchanged.
  std::function<void(const std::exception&)> on_collective_failure;
  const std::atomic<bool>* stop = nullptr;  ///< set: stop after the current step
};

/// One rank's mean step under data parallel (ms). Ranks step in lockstep, so a slow rank shows
/// as the others' wait for the all-reduce: its busy time (the step less that wait) is the
/// least waiting and the most busy.
struct RankTimes {
  double step_ms = 0;
  double busy_ms = 0;  ///< step_ms less communication_ms
  double communication_ms = 0;
  double data_wait_ms = 0;
};

struct Profile {
  // What ran.
  std::string model;  ///< the model's name
  std::string data;   ///< ProfileOptions::data_spec
  c10::Device device{c10::kCPU};
  DeviceProbe probe;
  int threads = 0;      ///< this process's intra-op threads
  int local_ranks = 1;  ///< ranks on this node, whose threads share its cores
  int workers = 0;
  int prefetch = 2;
  TrainOptions train;
  int64_t memory_limit_bytes = 0;  ///< 0: the device's own
  int64_t window_steps = 10;

  // The run (this rank's).
  int64_t steps = 0;  ///< steps taken
  bool is_interrupted = false;
  std::vector<StepRecord> records;  ///< every step, warm-up included
  ThroughputStats throughput;       ///< steady state, in windows of window_steps
  PhaseBreakdown phases;            ///< mean over the steady steps
  int64_t peak_memory_bytes = 0;    ///< 0 unknown
  /// The gradient noise scale over the run (steps == 0: not measured, e.g. one process without
  /// micro-batches), raw and preconditioned (AdamW).
  NoiseScaleEstimate noise, noise_precond;
  SampleSummary device_samples;
  std::string gpu_status;  ///< "NVML: N GPUs", or why GPUs were not sampled

  /// false: the step is known only as data wait and the rest (an --exec program): the table
  /// shows those two, not forward/backward/optimizer.
  bool phases_split = true;
  /// Lines the table shows after the memory (an --exec program's command, settings, processes).
  std::vector<std::string> details;
  /// CPU cores each input worker process used (an --exec program's; empty: not measured).
  std::vector<double> input_worker_cores;

  /// Every rank's times, in rank order (one entry for one process); gathered by every rank.
  std::vector<RankTimes> ranks;

  // Everything below is rank 0's to measure; other ranks leave it at the defaults.
  /// Rank 0 alone on the same steps (0: not measured; one_process_why says why when known).
  double one_process_samples_per_s = 0;
  std::string one_process_why;

  double train_flops_per_sample = 0;  ///< 3 × forward; 0 when the model does not say
  /// Text data: tokens per sample (the window), for tokens/s and FLOPs per token; 0: images.
  int64_t tokens_per_sample = 0;
  /// The attention kernel the model's training forward ran ("flash", "math", …; empty: none).
  std::string attention_kernel;
  double achieved_flops_per_s = 0;
  /// Measured fp32 GEMM rate of this machine (CPU only; 0 not measured): feeds the slow-BLAS
  /// rule.
  double gemm_peak_flops = 0;
  double mfu_peak_flops = 0;  ///< the reference peak in the run's matmul precision; 0 unknown
  std::string mfu_peak_precision = "fp32";
  /// achieved / mfu_peak_flops in percent; NaN when unknown.
  double mfu_pct = std::numeric_limits<double>::quiet_NaN();

  double page_faults_per_step = -1;  ///< steady steps' mean; -1 unknown
  PageFaultCost page_fault_cost;     ///< faults == 0: not measured
  bool cpu_cache = true;             ///< the caching CPU allocator is on
  CpuBudgetStats cpu_cache_stats;

  int64_t world_size() const { return static_cast<int64_t>(ranks.size()); }
  /// The job's samples/s: world × this rank's (ranks step together).
  double job_samples_per_s() const;
  /// job / (world × one process alone); NaN when the one-process run was not measured.
  double scaling_efficiency() const;
};

/// Runs the profile: a Trainer on job.loader for options.train.steps with device readings
/// around it, then (rank 0) the job's figures. Under data parallel every rank must call it;
/// the ranks gather their times and, with options.measure_scaling, rank 0 repeats the run
/// alone. Throws what the Trainer throws; an out-of-memory in the one-process run is a value
/// (one_process_why).
Profile run_profile_job(const ProfileOptions& options, ProfileJob& job);

/// `saturate profile --loader-only`: the input pipeline alone, no model.
struct LoaderProfile {
  std::string data;  ///< the data spec
  int threads = 0;   ///< intra-op threads (reported)
  int64_t batch_size = 0;
  int workers = 0;
  int prefetch = 0;
  int64_t batches = 0;
  double wall_s = 0;
  double samples_per_s = 0;
  double cpu_util_pct = 0;  ///< of all cores
  /// Per batch: making it (read, transform, collate; summed over workers) and the consumer's
  /// wait for it.
  double make_batch_ms = 0;
  double wait_ms = 0;
  double cache_hit_rate = 0;
  bool is_interrupted = false;
};

/// Pulls `batches` batches through `loader` (starting new epochs as needed), or fewer when
/// `stop` becomes true. `data` and `threads` are carried into the result for the report.
LoaderProfile run_loader_profile(Loader& loader, int64_t batches, const std::string& data,
                                 int threads, const std::atomic<bool>* stop = nullptr);

}  // namespace saturate
