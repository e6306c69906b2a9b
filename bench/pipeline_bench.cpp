// SPDX-License-Identifier: Apache-2.0
// Pipeline stages (issue 19): the measured bubble of GPipe and 1F1B against (S−1)/(M+S−1), and
// each stage's peak memory, on a model of identical blocks split evenly. One process per stage:
//
//   build/saturate launch --nproc-per-node 2 -- build/bench/saturate_pipeline_bench
//       [--micro-batches 1,2,4,8] [--blocks 8] [--width 512] [--batch 64] [--steps 20]
//
// Each rank runs one intra-op thread. A stage's bubble is the part of the step it did not
// compute (receiving, waiting, the loss broadcast): 1 − compute / step time, median over steps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "saturate/device/device_memory.h"
#include "saturate/distributed/dist_env.h"
#include "saturate/distributed/pipeline.h"
#include "saturate/distributed/process_group.h"
#include "saturate/models/model.h"
#include "saturate/models/sequential.h"

namespace {

using namespace saturate;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// `blocks` identical Linear(width, width)–tanh layers, the last one's output read as logits.
std::unique_ptr<Model> make_blocks(int64_t blocks, int64_t width) {
  torch::nn::Sequential net;
  for (int64_t i = 0; i < blocks; ++i) {  // two layers a block: stages split between blocks
    net->push_back(std::to_string(2 * i), torch::nn::Linear(width, width));
    net->push_back(std::to_string(2 * i + 1), torch::nn::Tanh());
  }
  return make_sequential_model("blocks", net);
}

struct Args {
  std::vector<int64_t> micro = {1, 2, 4, 8};
  int64_t blocks = 8, width = 512, batch = 64, steps = 20;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--micro-batches") {
      a.micro.clear();
      std::stringstream in(v);
      std::string item;
      while (std::getline(in, item, ',')) a.micro.push_back(std::atoll(item.c_str()));
    } else if (k == "--blocks") a.blocks = std::atoll(v.c_str());
    else if (k == "--width") a.width = std::atoll(v.c_str());
    else if (k == "--batch") a.batch = std::atoll(v.c_str());
    else if (k == "--steps") a.steps = std::atoll(v.c_str());
  }
  return a;
}

// One configuration: this stage's median bubble, step time, peak memory above the idle one and
// compute time.
std::vector<double> run(DistGroup& g, const Args& a, int64_t micro, PipelineSchedule schedule,
                        DeviceMemory& memory) {
  torch::manual_seed(1);
  const auto model = make_blocks(a.blocks, a.width);
  const auto spans = split_layers_evenly(model->pipeline_layers(), g.world_size());
  auto stage = model->pipeline_stage(spans[g.rank()].first, spans[g.rank()].second);
  torch::optim::SGD sgd(stage->parameters(), torch::optim::SGDOptions(1e-3));
  PipelineStage pipe(g, *stage, {micro, schedule});
  const at::Tensor x = torch::randn({a.batch, a.width});
  const at::Tensor y = torch::randint(0, a.width, {a.batch});
  std::vector<double> bubble, step_ms, compute_ms;
  int64_t peak = 0;
  for (int64_t s = 0; s < a.steps + 3; ++s) {
    sgd.zero_grad();
    g.barrier();
    const int64_t before = memory.snapshot().live_bytes;
    memory.reset_peak();
    const auto t0 = std::chrono::steady_clock::now();
    const PipelineStepStats st = pipe.forward_backward(x, y);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    sgd.step();
    if (s < 3) continue;  // warm-up
    bubble.push_back(1 - st.compute_ms / ms);
    step_ms.push_back(ms);
    compute_ms.push_back(st.compute_ms);
    peak = std::max(peak, memory.snapshot().peak_memory_bytes - before);
  }
  return {median(bubble), median(step_ms), static_cast<double>(peak), median(compute_ms)};
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  torch::set_num_threads(1);
  auto memory = make_device_memory(c10::Device("cpu"), 0);
  auto g = init_process_group(dist_env_from_environment(), DistBackend::kGloo, c10::Device("cpu"),
                              std::chrono::seconds(120));
  const int S = g->world_size();
  if (g->rank() == 0)
    std::printf("%d stages of %lld blocks of Linear(%lld)-tanh, batch %lld, %lld steps (median)\n",
                S, static_cast<long long>(a.blocks), static_cast<long long>(a.width),
                static_cast<long long>(a.batch), static_cast<long long>(a.steps));
  for (PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B}) {
    for (int64_t m : a.micro) {
      const auto all = g->allgather(run(*g, a, m, schedule, *memory));
      if (g->rank() != 0) continue;
      const double formula = pipeline_bubble(S, m);
      // The schedule's bubble where the stages' compute c_s differs: a step takes
      // (sum c_s + (M - 1) max c_s) / M, which is (S-1)/(M+S-1) of it idle when all are equal.
      double sum_c = 0, max_c = 0;
      for (int r = 0; r < S; ++r) {
        sum_c += all[r][3];
        max_c = std::max(max_c, all[r][3]);
      }
      const double expected_step = (sum_c + static_cast<double>(m - 1) * max_c) / static_cast<double>(m);
      double mean = 0, expected = 0;
      std::string per_stage, peaks;
      for (int r = 0; r < S; ++r) {
        mean += all[r][0] / S;
        expected += (1 - all[r][3] / expected_step) / S;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%.3f", r ? " " : "", all[r][0]);
        per_stage += buf;
        std::snprintf(buf, sizeof buf, "%s%.2f", r ? " " : "", all[r][2] / (1 << 20));
        peaks += buf;
      }
      std::printf("%-5s M=%-2lld bubble %.3f (stages %s) vs (S-1)/(M+S-1) %.3f, with the stages' "
                  "imbalance %.3f; step %.1f ms; peak MiB per stage %s\n",
                  to_string(schedule).c_str(), static_cast<long long>(m), mean, per_stage.c_str(),
                  formula, expected, all[0][1], peaks.c_str());
    }
  }
  return 0;
}
