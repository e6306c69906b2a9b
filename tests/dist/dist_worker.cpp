// SPDX-License-Identifier: Apache-2.0
// One rank of the multi-process dist tests; tests/dist/run_ranks.py starts several with the
// launcher's environment. Prints "rank R ok" and exits 0 when every check holds; a
// saturate::Error exits 2 with its message, anything else 1.
//
//   dist_worker collectives [TIMEOUT_S]
//   dist_worker equivalence [TIMEOUT_S]   W ranks of batch B vs one process of batch W·B
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/data/loader.h"
#include "saturate/data/sample_source.h"
#include "saturate/dist/data_parallel.h"
#include "saturate/dist/dist_env.h"
#include "saturate/dist/process_group.h"
#include "saturate/models/model.h"
#include "saturate/train/trainer.h"
#include "testing/pattern_dataset.h"

namespace saturate {
namespace {

#define EXPECT_OR_FAIL(cond, ...) SATURATE_ASSERT(cond, __VA_ARGS__)

void collectives(DistGroup& g) {
  const int r = g.rank(), w = g.world_size();
  std::vector<at::Tensor> t = {torch::full({3}, static_cast<float>(r + 1))};
  g.allreduce_sum(t);
  const float want = static_cast<float>(w * (w + 1) / 2);
  EXPECT_OR_FAIL(t[0].eq(want).all().item<bool>(), "all-reduce gave ", t[0], ", want ", want);
  std::vector<at::Tensor> b = {torch::full({2}, static_cast<float>(r == 0 ? 42 : -1))};
  g.broadcast(b, 0);
  EXPECT_OR_FAIL(b[0].eq(42).all().item<bool>(), "broadcast gave ", b[0]);
  const auto all = g.allgather({static_cast<double>(r), 10.0 * r});
  EXPECT_OR_FAIL(static_cast<int>(all.size()) == w, "all-gather gave ", all.size(), " ranks");
  for (int i = 0; i < w; ++i)
    EXPECT_OR_FAIL(all[i][0] == i && all[i][1] == 10.0 * i, "all-gather rank ", i, " wrong");
  g.barrier();
}

// `steps` plain-SGD steps of fmnist-cnn; with a group, each rank trains its shard of the
// loader's order in batches of `batch`, gradients averaged; the parameters at the end.
std::vector<at::Tensor> train(DistGroup* group, int64_t batch, int64_t accumulate,
                              uint64_t init_seed) {
  const auto data = testing::make_pattern_splits(512, 32);
  auto source = make_sample_source(data.train);
  TrainOptions o;
  o.batch_size = batch;
  o.accumulate = accumulate;
  o.steps = 5;
  o.optimizer = OptimizerKind::kSgd;
  o.momentum = 0.9;
  o.weight_decay = 1e-4;
  o.schedule = ScheduleKind::kConstant;
  o.warmup_steps = 0;
  o.lr = 0.05;
  o.evaluate = false;
  o.seed = 11;
  seed_everything(init_seed);
  auto model = make_model("fmnist-cnn", {data.train.sample_shape(), data.train.num_classes});
  std::unique_ptr<GradientSync> sync = group ? make_data_parallel(*group) : nullptr;
  Trainer trainer(*model, o, c10::Device("cpu"), nullptr, sync.get());
  LoaderOptions lo;
  lo.batch_size = batch;
  lo.seed = o.seed;
  lo.rank = group ? group->rank() : 0;
  lo.world = group ? group->world_size() : 1;
  lo.transform.mean = data.normalize_mean;
  lo.transform.std = data.normalize_std;
  Loader loader(*source, lo);
  trainer.fit(loader, data);
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

void equivalence(DistGroup& g) {
  const int64_t per_rank = 16;
  for (int64_t accumulate : {1, 2}) {
    // Different initial weights on each rank: attach must make them rank 0's.
    const auto dp = train(&g, per_rank, accumulate, /*init_seed=*/100 + g.rank());
    // Every rank ends with the same weights...
    for (const at::Tensor& p : dp) {
      std::vector<at::Tensor> sum = {p.clone()};
      g.allreduce_sum(sum);
      const double spread = (sum[0] / g.world_size() - p).abs().max().item<double>();
      EXPECT_OR_FAIL(spread == 0.0, "ranks disagree by ", spread, " (accumulate ", accumulate, ")");
    }
    // ...and they are one process's on the whole batch (rank 0's initial weights).
    const auto one = train(nullptr, per_rank * g.world_size(), accumulate, /*init_seed=*/100);
    for (size_t i = 0; i < one.size(); ++i) {
      const double diff = (dp[i] - one[i]).abs().max().item<double>();
      const double scale = std::max(1.0, one[i].abs().max().item<double>());
      EXPECT_OR_FAIL(diff <= 1e-5 * scale, "parameter ", i, " differs from one process by ",
                     diff, " (accumulate ", accumulate, ")");
    }
  }
}

}  // namespace
}  // namespace saturate

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a dead peer's socket must be an error, not a signal
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  const double timeout_s = argc > 2 ? std::atof(argv[2]) : 30.0;
  try {
    const saturate::DistEnv env = saturate::dist_env_from_environment();
    auto g = saturate::init_process_group(
        env, saturate::DistBackend::kGloo, c10::Device("cpu"),
        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    if (mode == "collectives") saturate::collectives(*g);
    else if (mode == "equivalence") saturate::equivalence(*g);
    else SATURATE_CHECK(false, "dist_worker: unknown mode '", mode, "'");
    std::cout << "rank " << env.rank << " ok" << std::endl;
    return 0;
  } catch (const saturate::Error& e) {
    std::cerr << "dist_worker: error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dist_worker: failure: " << e.what() << std::endl;
    return 1;
  }
}
