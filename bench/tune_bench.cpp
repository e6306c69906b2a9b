// SPDX-License-Identifier: Apache-2.0
// Batch-size search: saturate against Lightning's power and binsearch scaling and Accelerate's
// ×0.9 shrink, in one harness. Part (a) runs every strategy on the same seeded SimulatedDevice
// profiles and scores the chosen batch by its noise-free throughput against the exhaustive
// grid's best (every batch under the limit less the reserve), counting probe steps. Part (b)
// does the same on real CPU training steps of built-in models under a --memory-limit.
//
// Usage: saturate_tune_bench [--profiles N] [--noise MAX] [--measure-steps N] [--repeats N]
//        saturate_tune_bench --real MODEL:LIMIT [--real ...] [--grid-steps N] [--epoch-check 1]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "saturate/core/units.h"
#include "saturate/data/dataset.h"
#include "saturate/device/device_memory.h"
#include "saturate/device/threads.h"
#include "saturate/tune/baselines.h"
#include "saturate/tune/batch_search.h"
#include "saturate/tune/simulated_device.h"
#include "saturate/tune/torch_trial_runner.h"

namespace {

using saturate::RunConfig;
saturate::BatchSearchOptions g_search;  // saturate's options (flags below)

struct Pick {
  int64_t chosen = 0;
  int64_t steps = 0;
};

using Strategy = std::function<Pick(saturate::TrialRunner&, const RunConfig&)>;

std::vector<std::pair<std::string, Strategy>> strategies() {
  return {
      {"saturate",
       [](saturate::TrialRunner& r, const RunConfig& c) {
         const auto s = saturate::search_batch_size(r, c, g_search);
         if (std::getenv("SATURATE_BENCH_PURPOSES")) {
           static std::map<std::string, int64_t> by_purpose;
           for (const auto& t : s.trials) by_purpose[t.purpose] += t.outcome.steps_run;
           std::string line = "  steps by purpose:";
           for (const auto& [k, v] : by_purpose) line += " " + k + "=" + std::to_string(v);
           std::printf("%s\n", line.c_str());
         }
         return Pick{s.chosen, s.steps};
       }},
      {"lightning-power",
       [](saturate::TrialRunner& r, const RunConfig& c) {
         const auto s = saturate::lightning_power(r, c);
         return Pick{s.chosen, s.steps};
       }},
      {"lightning-binsearch",
       [](saturate::TrialRunner& r, const RunConfig& c) {
         const auto s = saturate::lightning_binsearch(r, c);
         return Pick{s.chosen, s.steps};
       }},
      {"accelerate-shrink",
       [](saturate::TrialRunner& r, const RunConfig& c) {
         const auto s = saturate::accelerate_shrink(r, c);
         return Pick{s.chosen, s.steps};
       }},
  };
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Score {
  std::vector<double> ratio, steps, steps_vs_binsearch;
  int can_oom = 0, found_none = 0, at_97 = 0;
};

void simulated(int profiles, double noise) {
  const double reserve = saturate::BatchSearchOptions{}.reserve;
  std::map<std::string, Score> scores;
  RunConfig base;
  base.train.batch_size = 32;
  for (int seed = 0; seed < profiles; ++seed) {
    const auto p = saturate::SimulatedProfile::random(seed, noise);
    // The exhaustive grid: every batch under the limit less the reserve, noise-free.
    const auto target = static_cast<int64_t>(static_cast<double>(p.limit_bytes) * (1 - reserve));
    double grid = 0;
    for (int64_t b = 1; b <= 65536; ++b) {
      RunConfig c = base;
      c.train.batch_size = b;
      if (p.worst_peak_memory_bytes(c) > target) break;
      grid = std::max(grid, p.true_samples_per_s(c));
    }
    std::map<std::string, Pick> picks;
    for (const auto& [name, run] : strategies()) {
      saturate::SimulatedDevice device(p, seed + 1000);
      picks[name] = run(device, base);
    }
    for (const auto& [name, pick] : picks) {
      Score& s = scores[name];
      RunConfig c = base;
      c.train.batch_size = std::max<int64_t>(1, pick.chosen);
      const bool oom = pick.chosen > 0 && p.worst_peak_memory_bytes(c) > p.limit_bytes;
      const double r = pick.chosen == 0 || oom ? 0.0 : p.true_samples_per_s(c) / grid;
      s.can_oom += oom ? 1 : 0;
      s.found_none += pick.chosen == 0 ? 1 : 0;
      s.at_97 += r >= 0.97 ? 1 : 0;
      if (r < 0.97 && name == "saturate" && std::getenv("SATURATE_BENCH_MISSES"))
        std::printf("  miss: seed %d, batch %lld, %.3f of grid: %s\n", seed,
                    static_cast<long long>(pick.chosen), r, p.describe().c_str());
      s.ratio.push_back(r);
      s.steps.push_back(static_cast<double>(pick.steps));
      s.steps_vs_binsearch.push_back(static_cast<double>(pick.steps) /
                                     static_cast<double>(picks["lightning-binsearch"].steps));
    }
  }
  std::printf("(a) %d simulated profiles, step noise up to %.0f%%, reserve %.0f%%\n", profiles,
              100 * noise, 100 * reserve);
  std::printf("  %-20s %9s %9s %7s %7s %9s %9s %11s\n", "strategy", "median", "worst",
              ">=97%", "can-OOM", "steps", "steps", "steps/bin-");
  std::printf("  %-20s %9s %9s %7s %7s %9s %9s %11s\n", "", "of grid", "of grid", "", "",
              "total", "median", "search med");
  for (const auto& [name, run] : strategies()) {
    const Score& s = scores[name];
    double total = 0;
    for (double x : s.steps) total += x;
    std::printf("  %-20s %9.4f %9.4f %7d %7d %9.0f %9.1f %11.3f\n", name.c_str(), median(s.ratio),
                *std::min_element(s.ratio.begin(), s.ratio.end()), s.at_97, s.can_oom, total,
                median(s.steps), median(s.steps_vs_binsearch));
  }
  double ours = 0, theirs = 0;
  for (double x : scores["saturate"].steps) ours += x;
  for (double x : scores["lightning-binsearch"].steps) theirs += x;
  std::printf("  saturate used %.1f%% of lightning-binsearch's probe steps in total\n",
              100.0 * ours / theirs);
}

// Throughput of `batch` measured the same way for every strategy: `steps` steps, the first
// untimed. 0 when it does not fit.
double measure(saturate::TrialRunner& runner, const RunConfig& base, int64_t batch,
               int64_t steps) {
  saturate::TrialRequest req;
  req.config = base;
  req.config.train.batch_size = batch;
  req.steps = steps;
  req.warmup_steps = 1;
  const auto t = runner.run(req);
  return t.fits ? t.measurement.samples_per_s : 0.0;
}

// Part (b): one model under one memory limit, on this machine's CPU.
void real(const std::string& model, const std::string& limit_text, int64_t grid_steps,
          bool epoch_check, const saturate::TrainingInput& data) {
  const int64_t limit = saturate::parse_bytes(limit_text, "--real");
  auto memory = saturate::make_device_memory(c10::Device("cpu"), limit);
  saturate::TorchTrialRunner runner(model, data, c10::Device("cpu"), *memory, 4096);
  RunConfig base;
  base.train.batch_size = 64;
  const double reserve = saturate::BatchSearchOptions{}.reserve;
  const auto target = static_cast<int64_t>(static_cast<double>(limit) * (1 - reserve));
  std::printf("(b) %s, fashion-mnist, CPU, memory limit %s (target %s), %d threads\n",
              model.c_str(), limit_text.c_str(), saturate::format_bytes(target).c_str(),
              saturate::configure_threads(0));
  // The grid: powers of two and their 1.5× up to the largest batch under the target.
  std::vector<std::pair<int64_t, double>> grid;
  double grid_best = 0;
  int64_t grid_best_batch = 0;
  bool past_target = false;
  for (int64_t p = 1; p <= 4096 && !past_target; p *= 2) {
    for (int64_t b : {p, p + p / 2}) {
      if ((b == p + p / 2 && p < 2) || b > 4096) continue;
      saturate::TrialRequest req;
      req.config = base;
      req.config.train.batch_size = b;
      req.steps = grid_steps;
      req.warmup_steps = 1;
      const auto t = runner.run(req);
      if (!t.fits || t.measurement.peak_memory_bytes > target) {
        past_target = true;
        break;
      }
      grid.emplace_back(b, t.measurement.samples_per_s);
      if (t.measurement.samples_per_s > grid_best) {
        grid_best = t.measurement.samples_per_s;
        grid_best_batch = b;
      }
    }
  }
  std::printf("  grid (%lld steps each):", static_cast<long long>(grid_steps));
  for (const auto& [b, sps] : grid) std::printf(" %lld:%.0f", static_cast<long long>(b), sps);
  std::printf("\n  grid best: batch %lld, %.1f samples/s\n",
              static_cast<long long>(grid_best_batch), grid_best);
  std::printf("  %-20s %7s %12s %9s %7s %7s\n", "strategy", "batch", "samples/s", "of grid",
              "steps", "OOMs");
  int64_t binsearch_steps = 0, ours_steps = 0, ours_batch = 0;
  for (const auto& [name, run_strategy] : strategies()) {
    saturate::CountingRunner counting(runner);
    const Pick pick = run_strategy(counting, base);
    // Score every pick by the same measurement as the grid.
    const double sps = pick.chosen > 0 ? measure(runner, base, pick.chosen, grid_steps) : 0.0;
    std::printf("  %-20s %7lld %12.1f %9.3f %7lld %7lld\n", name.c_str(),
                static_cast<long long>(pick.chosen), sps, sps / grid_best,
                static_cast<long long>(pick.steps), static_cast<long long>(counting.out_of_memory()));
    if (name == "lightning-binsearch") binsearch_steps = pick.steps;
    if (name == "saturate") {
      ours_steps = pick.steps;
      ours_batch = pick.chosen;
    }
  }
  std::printf("  saturate used %.1f%% of lightning-binsearch's probe steps\n",
              100.0 * static_cast<double>(ours_steps) / static_cast<double>(binsearch_steps));
  if (epoch_check && ours_batch > 0) {
    saturate::RunConfig c = base;
    c.train.batch_size = ours_batch;
    const int64_t epoch_steps = (data.source->size() + ours_batch - 1) / ours_batch;
    saturate::TrialRequest req;
    req.config = c;
    req.steps = epoch_steps;
    req.warmup_steps = 1;
    const auto t = runner.run(req);
    std::printf("  full epoch at batch %lld under the limit: %s, %lld steps, peak %s, %.1f samples/s\n",
                static_cast<long long>(ours_batch), t.fits ? "no OOM" : "OUT OF MEMORY",
                static_cast<long long>(t.steps_run),
                saturate::format_bytes(t.measurement.peak_memory_bytes).c_str(),
                t.measurement.samples_per_s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // As every saturate command that trains does, before any thread starts.
  saturate::configure_denormals(true);
  saturate::configure_host_allocator();
  int profiles = 300;
  std::vector<double> noises = {0.03, 0.08};
  std::vector<std::string> reals;
  int64_t grid_steps = 8;
  bool epoch_check = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--profiles") profiles = std::atoi(v.c_str());
    else if (k == "--noise") noises = {std::atof(v.c_str())};
    else if (k == "--measure-steps") g_search.measure_steps = std::atoll(v.c_str());
    else if (k == "--noise-steps") g_search.noise_steps = std::atoll(v.c_str());
    else if (k == "--repeats") g_search.max_repeats = std::atoi(v.c_str());
    else if (k == "--real") reals.push_back(v);
    else if (k == "--grid-steps") grid_steps = std::atoll(v.c_str());
    else if (k == "--epoch-check") epoch_check = v == "1";
  }
  if (!reals.empty()) {
    saturate::InputOptions in;
    in.data_spec = "fashion-mnist";
    const saturate::TrainingInput data = saturate::open_training_input(in, /*cuda_device=*/-1);
    for (const std::string& r : reals) {
      const size_t colon = r.find(':');
      real(r.substr(0, colon), r.substr(colon + 1), grid_steps, epoch_check, data);
    }
    return 0;
  }
  for (double n : noises) simulated(profiles, n);
  return 0;
}
