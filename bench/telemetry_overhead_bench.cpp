// SPDX-License-Identifier: Apache-2.0
// What does leaving all telemetry on cost? The same fmnist-cnn steps with no sinks, and with
// every sink (progress bar, TensorBoard, JSONL, trace) plus the device sampler, interleaved in
// one process; medians of several repeats. Goal: <= 1% samples/s difference.
//
// An A/B difference of 1% is below what two shared cores resolve, so the bench also accounts
// for the cost directly: the time spent inside the sinks per step (measured around every sink
// call of the telemetry-on runs) and the CPU time of the sampler thread (the process's CPU time
// while the sampler runs alone), each as a share of the step time and of the cores' time.
//
// Usage: saturate_telemetry_overhead_bench [--repeats N] [--batch N] [--steps N] [--data SPEC]
//                                          [--interval MS (0: no sampler)] [--sinks 0|1]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "saturate/data/dataset.h"
#include "saturate/device/threads.h"
#include "saturate/models/model.h"
#include "saturate/telemetry/console_progress.h"
#include "saturate/telemetry/file_sinks.h"
#include "saturate/telemetry/device_sampler.h"
#include "saturate/telemetry/tensorboard_writer.h"
#include "saturate/telemetry/throughput.h"
#include "saturate/train/trainer.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

using Clock = std::chrono::steady_clock;

// What "on" turns on (flags below), to tell the sinks' cost from the sampler's.
double g_interval_ms = 100;  // 0: no sampler
bool g_sinks = true;

// Passes everything on and adds up the wall time spent in the sinks it wraps.
class TimedSink : public saturate::TelemetrySink {
 public:
  explicit TimedSink(saturate::TelemetrySink& inner) : inner_(inner) {}
  void on_begin(int64_t total) override { inner_.on_begin(total); }
  void on_step(const saturate::StepRecord& r) override {
    const auto t = Clock::now();
    inner_.on_step(r);
    add(t);
  }
  void on_device_sample(int64_t step, const saturate::DeviceSample& s) override {
    const auto t = Clock::now();
    inner_.on_device_sample(step, s);
    add(t);
  }
  void on_eval(int64_t step, const std::string& m, double v) override { inner_.on_eval(step, m, v); }
  void on_end() override { inner_.on_end(); }
  double seconds = 0;

 private:
  void add(Clock::time_point t) {
    seconds += std::chrono::duration<double>(Clock::now() - t).count();
  }
  saturate::TelemetrySink& inner_;
};

struct RunOutcome {
  double samples_per_s = 0;
  double mean_step_ms = 0;
  double sink_us_per_step = 0;  // telemetry on only
};

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// CPU seconds the sampler thread uses per wall second at `interval_ms`, measured with nothing
// else running in the process.
double sampler_cpu_share(double interval_ms, double seconds) {
  saturate::SamplerOptions so;
  so.interval_ms = interval_ms;
  saturate::DeviceSampler sampler(so);
  const double c0 = process_cpu_s();
  sampler.start();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  sampler.stop();
  return (process_cpu_s() - c0) / seconds;
}

RunOutcome run(const saturate::DatasetSplits& data, int64_t batch, int64_t steps, bool telemetry,
               const std::string& dir) {
  saturate::seed_everything(5);
  auto model = saturate::make_model("fmnist-cnn", {data.train.sample_shape(), 10});
  saturate::TrainOptions o;
  o.batch_size = batch;
  o.steps = steps;
  o.evaluate = false;
  o.timing_warmup_steps = 5;
  saturate::Trainer trainer(*model, o, c10::Device("cpu"));
  saturate::MemorySink records;  // both runs keep records: that is how throughput is read
  saturate::MultiSink sinks;
  sinks.add(&records);
  std::ofstream devnull("/dev/null");
  saturate::ConsoleProgress progress(devnull, /*is_tty=*/true, "bench", /*min_interval_ms=*/100);
  std::unique_ptr<saturate::TensorBoardSink> tb;
  std::unique_ptr<saturate::JsonlSink> jsonl;
  std::unique_ptr<saturate::TraceSink> trace;
  std::unique_ptr<saturate::DeviceSampler> sampler;
  if (telemetry && g_sinks) {
    tb = std::make_unique<saturate::TensorBoardSink>(dir);
    jsonl = std::make_unique<saturate::JsonlSink>(dir + "/steps.jsonl");
    trace = std::make_unique<saturate::TraceSink>(dir + "/trace.json");
    sinks.add(&progress);
    sinks.add(tb.get());
    sinks.add(jsonl.get());
    sinks.add(trace.get());
  }
  if (telemetry && g_interval_ms > 0) {
    saturate::SamplerOptions so;
    so.interval_ms = g_interval_ms;
    sampler = std::make_unique<saturate::DeviceSampler>(so);
    sampler->start();
  }
  RunOutcome out;
  if (telemetry) {
    // Sampler readings reach the sinks on the training thread, as in `saturate train`.
    std::unique_ptr<saturate::SampledSink> sampled;
    if (sampler) sampled = std::make_unique<saturate::SampledSink>(*sampler, sinks);
    TimedSink timed(sampled ? static_cast<saturate::TelemetrySink&>(*sampled) : sinks);
    trainer.fit(data, &timed);
    if (sampler) sampler->stop();
    out.sink_us_per_step = 1e6 * timed.seconds / static_cast<double>(steps);
  } else {
    trainer.fit(data, &sinks);
  }
  const auto tp = saturate::steady_throughput(records.records(), 5, 0);
  out.samples_per_s = tp.samples_per_s;
  double ms = 0;
  for (const auto& r : records.records()) ms += r.step_ms;
  out.mean_step_ms = ms / static_cast<double>(records.records().size());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 7;
  int64_t batch = 64, steps = 150;
  std::string spec = "fashion-mnist";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--repeats") repeats = std::atoi(v.c_str());
    else if (k == "--batch") batch = std::atoll(v.c_str());
    else if (k == "--steps") steps = std::atoll(v.c_str());
    else if (k == "--data") spec = v;
    else if (k == "--interval") g_interval_ms = std::atof(v.c_str());
    else if (k == "--sinks") g_sinks = std::atoi(v.c_str()) != 0;
  }
  char tmpl[] = "/tmp/saturate-telemetry-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const int threads = saturate::configure_threads(0);
  const saturate::DatasetSplits data = saturate::load_dataset(spec);
  std::vector<double> off, on, ratio, sink_share;
  for (int r = 0; r < repeats; ++r) {
    RunOutcome a, b;
    // Alternate which goes first so drift does not favour either.
    if (r % 2 == 0) {
      a = run(data, batch, steps, false, dir);
      b = run(data, batch, steps, true, dir);
    } else {
      b = run(data, batch, steps, true, dir);
      a = run(data, batch, steps, false, dir);
    }
    off.push_back(a.samples_per_s);
    on.push_back(b.samples_per_s);
    ratio.push_back(b.samples_per_s / a.samples_per_s);
    sink_share.push_back(b.sink_us_per_step / (1000.0 * b.mean_step_ms));
  }
  const double sampler_share = g_interval_ms > 0 ? sampler_cpu_share(g_interval_ms, 5.0) : 0.0;
  std::printf("telemetry overhead: fmnist-cnn, cpu, %d threads, batch %lld, %lld steps, %d repeats\n",
              threads, static_cast<long long>(batch), static_cast<long long>(steps), repeats);
  std::printf("  off  %10.1f samples/s (median)\n", median(off));
  std::printf("  on   %10.1f samples/s (median; progress, TensorBoard, JSONL, trace, sampler 100 ms)\n",
              median(on));
  std::printf("  ratio on/off: median %.4f (difference %.2f%%), per repeat:", median(ratio),
              (1.0 - median(ratio)) * 100.0);
  for (double x : ratio) std::printf(" %.3f", x);
  std::printf("\n");
  std::printf("  accounted cost: sinks %.4f%% of step time (median; per repeat max %.4f%%),\n"
              "                  sampler thread %.4f%% of one core, %.4f%% of %d threads\n",
              100.0 * median(sink_share),
              100.0 * *std::max_element(sink_share.begin(), sink_share.end()),
              100.0 * sampler_share, 100.0 * sampler_share / threads, threads);
  std::printf("  total accounted: %.4f%% (goal <= 1%%)\n",
              100.0 * (median(sink_share) + sampler_share / threads));
  std::system(("rm -rf " + dir).c_str());
  return 0;
}
