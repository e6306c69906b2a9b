// SPDX-License-Identifier: Apache-2.0
// What does leaving all telemetry on cost? The same fmnist-cnn steps with no sinks, and with
// every sink (progress bar, TensorBoard, JSONL, trace) plus the device sampler, interleaved in
// one process; medians of several repeats. Goal: <= 1% samples/s difference.
//
// Usage: saturate_telemetry_overhead_bench [--repeats N] [--batch N] [--steps N] [--data SPEC]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "saturate/data/dataset.h"
#include "saturate/device/threads.h"
#include "saturate/models/model.h"
#include "saturate/telemetry/console_progress.h"
#include "saturate/telemetry/file_sinks.h"
#include "saturate/telemetry/sampler.h"
#include "saturate/telemetry/tensorboard_writer.h"
#include "saturate/telemetry/throughput.h"
#include "saturate/train/trainer.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double run(const saturate::DatasetSplits& data, int64_t batch, int64_t steps, bool telemetry,
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
  if (telemetry) {
    tb = std::make_unique<saturate::TensorBoardSink>(dir);
    jsonl = std::make_unique<saturate::JsonlSink>(dir + "/steps.jsonl");
    trace = std::make_unique<saturate::TraceSink>(dir + "/trace.json");
    sinks.add(&progress);
    sinks.add(tb.get());
    sinks.add(jsonl.get());
    sinks.add(trace.get());
    saturate::SamplerOptions so;
    so.interval_ms = 100;
    sampler = std::make_unique<saturate::DeviceSampler>(so);
    sampler->start();
  }
  trainer.fit(data, &sinks);
  if (sampler) sampler->stop();
  return saturate::steady_throughput(records.records(), 5, 0).samples_per_s;
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
  }
  char tmpl[] = "/tmp/saturate-telemetry-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const int threads = saturate::configure_threads(0);
  const saturate::DatasetSplits data = saturate::load_dataset(spec);
  std::vector<double> off, on, ratio;
  for (int r = 0; r < repeats; ++r) {
    double a = 0, b = 0;
    // Alternate which goes first so drift does not favour either.
    if (r % 2 == 0) {
      a = run(data, batch, steps, false, dir);
      b = run(data, batch, steps, true, dir);
    } else {
      b = run(data, batch, steps, true, dir);
      a = run(data, batch, steps, false, dir);
    }
    off.push_back(a);
    on.push_back(b);
    ratio.push_back(b / a);
  }
  std::printf("telemetry overhead: fmnist-cnn, cpu, %d threads, batch %lld, %lld steps, %d repeats\n",
              threads, static_cast<long long>(batch), static_cast<long long>(steps), repeats);
  std::printf("  off  %10.1f samples/s (median)\n", median(off));
  std::printf("  on   %10.1f samples/s (median; progress, TensorBoard, JSONL, trace, sampler 100 ms)\n",
              median(on));
  std::printf("  ratio on/off: median %.4f (difference %.2f%%), per repeat:", median(ratio),
              (1.0 - median(ratio)) * 100.0);
  for (double x : ratio) std::printf(" %.3f", x);
  std::printf("\n");
  std::system(("rm -rf " + dir).c_str());
  return 0;
}
