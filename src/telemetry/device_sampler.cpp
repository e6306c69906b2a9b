// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/device_sampler.h"

#include <utility>

#include "saturate/core/error.h"
#include "saturate/telemetry/nvml.h"

namespace saturate {

DeviceSampler::DeviceSampler(SamplerOptions options) : options_(std::move(options)) {
  // The negated form also rejects NaN.
  SATURATE_CHECK(options_.interval_ms > 0 && options_.interval_ms <= 60000,
                 "sampler: --interval must be > 0 and <= 60000 ms, got ", options_.interval_ms);
  if (options_.sample_gpus) nvml_ = std::make_unique<Nvml>(options_.nvml_library);
  t0_ = Clock::now();
  now_previous_ = read_proc_stat();
}

DeviceSampler::~DeviceSampler() { stop(); }

void DeviceSampler::start() {
  std::lock_guard<std::mutex> control(control_mutex_);
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_requested_ = false;
    is_running_ = true;
    samples_.clear();
    t0_ = Clock::now();
    thread_previous_ = read_proc_stat();
  }
  thread_ = std::thread(&DeviceSampler::run, this);
}

void DeviceSampler::stop() {
  std::lock_guard<std::mutex> control(control_mutex_);
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_requested_ = true;
  }
  wake_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  is_running_ = false;
}

bool DeviceSampler::is_running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return is_running_;
}

void DeviceSampler::run() {
  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(options_.interval_ms));
  std::unique_lock<std::mutex> lock(mutex_);
  // Deadlines advance from the start time, so a slow NVML call does not shift later samples.
  Clock::time_point next = t0_ + interval;
  ProcStat previous = thread_previous_;
  for (;;) {
    if (wake_.wait_until(lock, next, [this] { return stop_requested_; })) break;
    lock.unlock();
    DeviceSample s = take_sample(previous);
    lock.lock();
    samples_.push_back(std::move(s));
    next += interval;
    const Clock::time_point now = Clock::now();
    if (next <= now) next = now + interval;  // fell behind: skip, do not burst
  }
  thread_previous_ = previous;
}

DeviceSample DeviceSampler::take_sample(ProcStat& previous) const {
  DeviceSample s;
  ProcStat current = read_proc_stat();
  s.cpu = cpu_util_between(previous, current);
  previous = std::move(current);
  s.cpu.process_rss_bytes = read_process_rss_bytes();
  if (nvml_ != nullptr) s.gpus = nvml_->sample();
  Clock::time_point t0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    t0 = t0_;
  }
  s.t_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return s;
}

std::vector<DeviceSample> DeviceSampler::samples() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return samples_;
}

std::vector<DeviceSample> DeviceSampler::samples_from(size_t first) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (first >= samples_.size()) return {};
  return std::vector<DeviceSample>(samples_.begin() + static_cast<std::ptrdiff_t>(first),
                                   samples_.end());
}

std::optional<DeviceSample> DeviceSampler::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (samples_.empty()) return std::nullopt;
  return samples_.back();
}

std::string DeviceSampler::gpu_status() const {
  if (nvml_ == nullptr) return "GPU sampling off";
  if (!nvml_->is_loaded()) return nvml_->unavailable_reason();
  return "NVML: " + std::to_string(nvml_->device_count()) + " GPUs";
}

DeviceSample DeviceSampler::sample_now() {
  std::lock_guard<std::mutex> lock(now_mutex_);
  return take_sample(now_previous_);
}

void SampledSink::deliver() {
  for (const DeviceSample& s : sampler_.samples_from(next_)) {
    downstream_.on_device_sample(last_step_, s);
    ++next_;
  }
}

void SampledSink::on_begin(int64_t total_steps) { downstream_.on_begin(total_steps); }

void SampledSink::on_step(const StepRecord& r) {
  downstream_.on_step(r);
  last_step_ = r.step;
  deliver();
}

void SampledSink::on_eval(int64_t step, const std::string& metric, double value) {
  downstream_.on_eval(step, metric, value);
}

void SampledSink::on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                                  const std::string& why) {
  downstream_.on_batch_change(step, batch, lr_multiplier, why);
}

void SampledSink::on_checkpoint(int64_t steps_done) {
  deliver();
  downstream_.on_checkpoint(steps_done);
}

void SampledSink::on_end() {
  deliver();
  downstream_.on_end();
}

}  // namespace saturate
