// SPDX-License-Identifier: Apache-2.0
// What does saturate's trainer cost over a bare hand-written LibTorch loop? Both run the same
// fmnist-cnn steps (same initial weights, AdamW, Fashion-MNIST batches gathered and normalised
// the same way) in one process, interleaved, several repeats; the table reports medians and the
// ratio. Goal: overhead <= 3%.
//
// Both loops run on the memory set-up `saturate train` gives every CPU run (malloc settings and
// the CPU caching allocator, through make_device_memory), so the ratio is the trainer's own
// cost; SATURATE_CPU_CACHE=off runs both on the system allocator instead (step_vs_pytorch.py
// measures what the allocator itself buys).
//
// Usage: saturate_trainer_overhead_bench [--repeats N] [--data SPEC] [--batch-sizes 32,128,512]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "saturate/data/dataset.h"
#include "saturate/device/cpu_budget.h"
#include "saturate/device/device_memory.h"
#include "saturate/device/threads.h"
#include "saturate/models/model.h"
#include "saturate/train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kWarmupSteps = 5;
constexpr int64_t kSamplesPerRun = 12288;  // steps = max(24, kSamplesPerRun / batch)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The loop a LibTorch user writes by hand: shuffled indices, gather, normalise, step.
double bare_loop_samples_per_s(saturate::Model& model, const saturate::DatasetSplits& data,
                               int64_t batch, int64_t steps, uint64_t seed) {
  torch::optim::AdamW opt(model.parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(1e-4));
  model.train(true);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t n = data.train.size();
  at::Tensor order = at::randperm(n, gen, at::kLong);
  int64_t cursor = 0;
  double ms = 0.0;
  int64_t samples = 0;
  for (int64_t step = 0; step < steps; ++step) {
    const auto t0 = Clock::now();
    if (cursor + batch > n) {
      order = at::randperm(n, gen, at::kLong);
      cursor = 0;
    }
    at::Tensor idx = order.slice(0, cursor, cursor + batch);
    cursor += batch;
    at::Tensor x = data.train.inputs.index_select(0, idx).to(at::kFloat).div_(255.0)
                       .sub_(data.normalize_mean).div_(data.normalize_std);
    at::Tensor y = data.train.targets.index_select(0, idx);
    at::Tensor loss = torch::nn::functional::cross_entropy(model.forward(x), y);
    opt.zero_grad(true);
    loss.backward();
    opt.step();
    (void)loss.item<double>();  // the trainer reads the loss every step too
    const auto t1 = Clock::now();
    if (step >= kWarmupSteps) {
      ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
      samples += batch;
    }
  }
  return samples / (ms / 1000.0);
}

double saturate_samples_per_s(saturate::Model& model, const saturate::DatasetSplits& data,
                              int64_t batch, int64_t steps, uint64_t seed) {
  saturate::TrainOptions o;
  o.batch_size = batch;
  o.steps = steps;
  o.seed = seed;
  o.evaluate = false;
  o.timing_warmup_steps = kWarmupSteps;
  saturate::Trainer trainer(model, o, c10::Device("cpu"));
  return trainer.fit(data).samples_per_s;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoll(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  std::string spec = "fashion-mnist";
  std::vector<int64_t> batches = {32, 128, 512};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--data")) spec = argv[i + 1];
    else if (!std::strcmp(argv[i], "--batch-sizes")) batches = parse_list(argv[i + 1]);
  }
  const int threads = saturate::configure_threads(0);
  saturate::configure_host_allocator();
  const auto memory = saturate::make_device_memory(c10::Device("cpu"), /*limit_bytes=*/0);
  const saturate::DatasetSplits data = saturate::load_dataset(spec);
  std::printf("trainer overhead: fmnist-cnn on %s, cpu, %d threads, %d repeats (medians), %s\n",
              spec.c_str(), threads, repeats,
              saturate::cpu_cache_enabled() ? "cpu caching allocator" : "system allocator");
  std::printf("%6s %6s %14s %14s %9s %10s\n", "batch", "steps", "bare samp/s", "saturate", "ratio",
              "overhead");
  for (int64_t b : batches) {
    const int64_t steps = std::max<int64_t>(24, kSamplesPerRun / b);
    std::vector<double> bare, sat, ratio;
    for (int r = 0; r < repeats; ++r) {
      // Same initial weights for both; alternate which goes first to cancel drift.
      const uint64_t seed = 100 + r;
      double a = 0, s = 0;
      for (int which = 0; which < 2; ++which) {
        torch::manual_seed(seed);
        auto model = saturate::make_model("fmnist-cnn", {data.train.sample_shape(), 10});
        const bool run_bare = (which == 0) == (r % 2 == 0);
        if (run_bare) a = bare_loop_samples_per_s(*model, data, b, steps, seed);
        else s = saturate_samples_per_s(*model, data, b, steps, seed);
      }
      bare.push_back(a);
      sat.push_back(s);
      ratio.push_back(s / a);
    }
    const double rm = median(ratio);
    std::printf("%6lld %6lld %14.1f %14.1f %9.3f %9.1f%%\n", static_cast<long long>(b),
                static_cast<long long>(steps), median(bare), median(sat), rm, (1.0 - rm) * 100.0);
  }
  return 0;
}
