// SPDX-License-Identifier: Apache-2.0
#pragma once
// DeviceSampler: a background thread that records host CPU, process memory and (through NVML,
// when present) GPU readings at a fixed interval while training runs.
//
//   DeviceSampler sampler(SamplerOptions{});   // 500 ms, GPUs when NVML loads
//   sampler.start(); train(); sampler.stop();
//   for (const DeviceSample& s : sampler.samples()) ...

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "saturate/telemetry/device_sample.h"
#include "saturate/telemetry/proc_stats.h"
#include "saturate/telemetry/telemetry_sink.h"

namespace saturate {

class Nvml;

struct SamplerOptions {
  double interval_ms = 500;  ///< time between samples; (0, 60000].
  bool sample_gpus = true;   ///< load NVML and read GPUs; false samples the CPU only.
  std::string nvml_library;  ///< NVML path; empty: $SATURATE_NVML_LIBRARY, else the system's.
};

/// Samples on its own thread between start() and stop(). All methods are thread-safe. Keeps every
/// sample in memory (about 7200 per hour at the default interval).
class DeviceSampler {
 public:
  /// Throws saturate::Error for an interval outside (0, 60000] ms. A missing NVML is not an
  /// error: the sampler then records the CPU only and gpu_status() says why.
  explicit DeviceSampler(SamplerOptions options = {});
  ~DeviceSampler();  ///< stops and joins the thread
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  /// Clears earlier samples and starts the thread; the first sample comes one interval later, so
  /// its CPU utilisation covers a full interval. Does nothing while already running.
  void start();
  /// Wakes and joins the thread without waiting out the interval. Samples are kept.
  void stop();
  bool is_running() const;

  /// Copy of every sample since start(), oldest first.
  std::vector<DeviceSample> samples() const;
  /// Copy of the samples from index `first` on (empty when there are none yet).
  std::vector<DeviceSample> samples_from(size_t first) const;
  /// The newest sample; nullopt before the first one.
  std::optional<DeviceSample> latest() const;
  /// "NVML: N GPUs", or why GPUs are not sampled (the NVML unavailable reason).
  std::string gpu_status() const;

  /// One reading now, independent of the thread. CPU utilisation covers the time since the
  /// previous sample_now() call (or construction); t_s counts from construction or start().
  DeviceSample sample_now();

  const SamplerOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  void run();
  DeviceSample take_sample(ProcStat& previous) const;

  SamplerOptions options_;
  std::unique_ptr<Nvml> nvml_;  // null when sample_gpus is false

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_requested_ = false;
  bool is_running_ = false;
  Clock::time_point t0_;
  std::vector<DeviceSample> samples_;
  ProcStat thread_previous_;  // the worker's last /proc/stat reading
  ProcStat now_previous_;     // sample_now()'s last reading
  std::thread thread_;

  mutable std::mutex now_mutex_;  // serialises sample_now() callers
  std::mutex control_mutex_;      // serialises start() and stop()
};

/// Passes every call on to `downstream` and, on the calling (training) thread, delivers the
/// sampler's new readings to it as on_device_sample after each step and at the end, so sinks
/// see steps and samples in one order without locks.
///
///   SampledSink sampled(sampler, sinks);  trainer.fit(data, &sampled);
class SampledSink : public TelemetrySink {
 public:
  SampledSink(const DeviceSampler& sampler, TelemetrySink& downstream)
      : sampler_(sampler), downstream_(downstream) {}
  void on_begin(int64_t total_steps) override;
  void on_step(const StepRecord& r) override;
  void on_eval(int64_t step, const std::string& metric, double value) override;
  void on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                       const std::string& why) override;
  void on_checkpoint(int64_t steps_done) override;
  void on_end() override;
  /// Samples delivered so far.
  size_t delivered() const { return next_; }

 private:
  void deliver();
  const DeviceSampler& sampler_;
  TelemetrySink& downstream_;
  size_t next_ = 0;
  int64_t last_step_ = -1;
};

}  // namespace saturate
