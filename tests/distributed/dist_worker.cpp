// SPDX-License-Identifier: Apache-2.0
// One rank of the multi-process dist tests; tests/dist/run_ranks.py starts several with the
// launcher's environment. Prints "rank R ok" and exits 0 when every check holds; a
// saturate::Error exits 2 with its message, anything else 1.
//
//   dist_worker collectives [TIMEOUT_S]
//   dist_worker equivalence [TIMEOUT_S]   W ranks of batch B vs one process of batch W·B
//   dist_worker oom_one_rank              rank 1 runs out of memory alone: both trials end OOM
//   dist_worker oom_one_rank_unagreed     the same without agree_on_oom: rank 0 times out
//   dist_worker nccl                      NCCL on cuda:LOCAL_RANK (exit 77 without a GPU)
//   dist_worker equivalence_batchnorm     the same with BatchNorm (a small CNN), against one
//                                         process accumulating the ranks' micro-batches
//   dist_worker noise_scale               the gradient noise scale measured across the ranks
//                                         (and with accumulation) within 10% of the truth
//   dist_worker pipeline [MODEL]          the ranks as pipeline stages (GPipe and 1F1B, M = 1,
//                                         4, 8) end 6 SGD steps (the last batch of 3) with one process's parameters
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cmath>
#include <iostream>
#include <map>
#include <string>

#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/data/loader.h"
#include "saturate/data/sample_source.h"
#include "saturate/device/device_memory.h"
#include "saturate/distributed/data_parallel.h"
#include "saturate/distributed/dist_env.h"
#include "saturate/distributed/pipeline.h"
#include "saturate/distributed/tensor_parallel.h"
#include "saturate/distributed/process_group.h"
#include "saturate/models/model.h"
#include "saturate/train/oom_probe.h"
#include "saturate/train/precision.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/train/staged_step.h"
#include "saturate/train/trainer.h"
#include "testing/noise_truth.h"
#include "testing/pattern_dataset.h"
#include "testing/sgd_steps.h"

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

// The batches W ranks train on, in one process: each step's batch is every rank's batch in rank
// order, so that split into W·A micro-batches it is the ranks' A micro-batches each, and a
// BatchNorm sees the batches the ranks' BatchNorms saw.
class ShardedBatches final : public BatchSource {
 public:
  ShardedBatches(const SampleSource& source, LoaderOptions o, int world) {
    for (int r = 0; r < world; ++r) {
      o.rank = r;
      o.world = world;
      shards_.push_back(std::make_unique<Loader>(source, o));
    }
  }
  void start_epoch(int64_t epoch) override {
    for (auto& s : shards_) s->start_epoch(epoch);
  }
  std::optional<Batch> next() override {
    std::vector<at::Tensor> inputs, targets;
    for (auto& s : shards_) {
      std::optional<Batch> b = s->next();
      if (!b) return std::nullopt;
      inputs.push_back(b->inputs);
      targets.push_back(b->targets);
    }
    Batch all;
    all.inputs = torch::cat(inputs);
    all.targets = torch::cat(targets);
    return all;
  }
  int64_t batches_per_epoch() const override { return shards_[0]->batches_per_epoch(); }

 private:
  std::vector<std::unique_ptr<Loader>> shards_;
};

// A small CNN with BatchNorm after each conv (ResNet-18 has the same layers, but is too slow
// for a test on two cores): conv-BN-ReLU-pool, twice, then a linear layer.
class BatchNormCnn final : public Model {
 public:
  explicit BatchNormCnn(const ModelInputs& in) {
    namespace nn = torch::nn;
    const int64_t c = in.sample_shape[0], h = in.sample_shape[1], w = in.sample_shape[2];
    net_ = nn::Sequential(nn::Conv2d(nn::Conv2dOptions(c, 8, 3).padding(1)), nn::BatchNorm2d(8),
                          nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(nn::Conv2dOptions(8, 16, 3).padding(1)), nn::BatchNorm2d(16),
                          nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                          nn::Linear(16 * (h / 4) * (w / 4), in.num_classes));
  }
  std::string name() const override { return "bn-cnn"; }
  at::Tensor forward(const at::Tensor& x) override { return net_->forward(x); }
  std::vector<at::Tensor> parameters() override { return net_->parameters(); }
  std::vector<at::Tensor> state_tensors() override {
    std::vector<at::Tensor> all = net_->parameters();
    for (const at::Tensor& b : net_->buffers()) all.push_back(b);
    return all;
  }
  void train(bool on) override { net_->train(on); }
  bool is_training() const override { return net_->is_training(); }
  void to(const c10::Device& d) override { net_->to(d); }

 private:
  torch::nn::Sequential net_{nullptr};
};

std::unique_ptr<Model> build(const std::string& name, const ModelInputs& in) {
  if (name == "bn-cnn") return std::make_unique<BatchNormCnn>(in);
  return make_model(name, in);
}

struct Run {
  std::string model = "fmnist-cnn";
  int64_t batch = 16;
  int64_t accumulate = 1;
  uint64_t init_seed = 100;
  int reference_world = 0;  ///< one process on the micro-batches of this many ranks
  c10::Device device{c10::kCPU};
  bool reduce_alone = false;  ///< the reducer's buckets even in a group of one
};

// 5 plain-SGD steps; with a group, each rank trains its shard of the loader's order in batches
// of `batch`, gradients averaged. The parameters at the end, then the buffers.
std::vector<at::Tensor> train(DistGroup* group, const Run& run) {
  const auto data = testing::make_pattern_splits(512, 32);
  auto source = make_sample_source(data.train);
  TrainOptions o = testing::sgd_steps(run.batch, /*steps=*/5, /*lr=*/0.05);
  o.accumulate = run.accumulate;
  o.momentum = 0.9;
  o.weight_decay = 1e-4;
  o.seed = 11;
  seed_everything(run.init_seed);
  auto model = build(run.model, {data.train.sample_shape(), data.train.num_classes});
  DataParallelOptions dpo;
  dpo.reduce_alone = run.reduce_alone;
  std::unique_ptr<GradientSync> sync = group ? make_data_parallel(*group, dpo) : nullptr;
  LoaderOptions lo;
  lo.batch_size = run.batch;
  lo.seed = o.seed;
  lo.rank = group ? group->rank() : 0;
  lo.world = group ? group->world_size() : 1;
  lo.transform.mean = data.normalize_mean;
  lo.transform.std = data.normalize_std;
  if (run.reference_world > 0) {
    // The same steps in one process: micro-batches of every rank, accumulated.
    o.batch_size = run.batch * run.reference_world;
    o.accumulate = run.accumulate * run.reference_world;
    Trainer trainer(*model, o, run.device, nullptr, nullptr);
    ShardedBatches batches(*source, lo, run.reference_world);
    trainer.fit(batches, data);
  } else {
    Trainer trainer(*model, o, run.device, nullptr, sync.get());
    Loader loader(*source, lo);
    trainer.fit(loader, data);
  }
  if (group && run.model == "bn-cnn") {
    // Each rank's running statistics come from its own batches; an evaluation must use one
    // model's (rank 0's), which before_evaluate hands out.
    std::vector<at::Tensor> buffers = model->state_tensors();
    buffers.erase(buffers.begin(), buffers.begin() + static_cast<long>(model->parameters().size()));
    auto spread = [&] {
      double most = 0;
      for (const at::Tensor& b : buffers) {
        std::vector<at::Tensor> sum = {b.to(torch::kDouble)};
        group->allreduce_sum(sum);
        most = std::max(most, (sum[0] / group->world_size() - b.to(torch::kDouble)).abs().max().item<double>());
      }
      return most;
    };
    const double before = spread();
    EXPECT_OR_FAIL(before > 0, "the ranks' BatchNorm statistics agree before any broadcast");
    sync->before_evaluate();
    EXPECT_OR_FAIL(spread() == 0, "the ranks' BatchNorm statistics differ after before_evaluate");
  }
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : model->parameters()) out.push_back(p.detach().cpu().clone());
  return out;
}

void expect_same_on_every_rank(DistGroup& g, const std::vector<at::Tensor>& params,
                               const std::string& what) {
  for (const at::Tensor& p : params) {
    std::vector<at::Tensor> sum = {p.clone()};
    g.allreduce_sum(sum);
    const double spread = (sum[0] / g.world_size() - p).abs().max().item<double>();
    EXPECT_OR_FAIL(spread == 0.0, "ranks disagree by ", spread, " (", what, ")");
  }
}

void expect_close(const std::vector<at::Tensor>& dp, const std::vector<at::Tensor>& one,
                  const std::string& what) {
  EXPECT_OR_FAIL(dp.size() == one.size(), "parameter counts differ (", what, ")");
  for (size_t i = 0; i < one.size(); ++i) {
    const double diff = (dp[i] - one[i]).abs().max().item<double>();
    const double scale = std::max(1.0, one[i].abs().max().item<double>());
    EXPECT_OR_FAIL(diff <= 1e-5 * scale, "parameter ", i, " differs from one process by ", diff,
                   " (", what, ")");
  }
}

void equivalence(DistGroup& g) {
  for (int64_t accumulate : {1, 2}) {
    const std::string what = "fmnist-cnn, accumulate " + std::to_string(accumulate);
    // Different initial weights on each rank: attach must make them rank 0's.
    Run run;
    run.accumulate = accumulate;
    run.init_seed = 100 + g.rank();
    const auto dp = train(&g, run);
    expect_same_on_every_rank(g, dp, what);
    // ...and they are one process's on the whole batch (rank 0's initial weights).
    Run one = run;
    one.batch = run.batch * g.world_size();
    one.init_seed = 100;
    expect_close(dp, train(nullptr, one), what);
  }
}

void equivalence_batchnorm(DistGroup& g) {
  // BatchNorm normalises each rank's batch with that batch's statistics (as DDP does), so the
  // one-process reference with the same steps is one that accumulates the ranks' micro-batches.
  for (int64_t accumulate : {1, 2}) {
    const std::string what = "bn-cnn, accumulate " + std::to_string(accumulate);
    Run run;
    run.model = "bn-cnn";
    run.accumulate = accumulate;
    run.init_seed = 100 + g.rank();
    const auto dp = train(&g, run);
    expect_same_on_every_rank(g, dp, what);
    Run one = run;
    one.init_seed = 100;
    one.reference_world = g.world_size();
    expect_close(dp, train(nullptr, one), what);
    // Not one process on the whole batch: its BatchNorm would normalise over both halves.
    Run whole = one;
    whole.reference_world = 0;
    whole.batch = run.batch * g.world_size();
    const auto naive = train(nullptr, whole);
    double most = 0;
    for (size_t i = 0; i < naive.size(); ++i)
      most = std::max(most, (dp[i] - naive[i]).abs().max().item<double>());
    EXPECT_OR_FAIL(most > 1e-4, "BatchNorm over the whole batch gave the ranks' steps (", most,
                   "): the test cannot tell local statistics from global ones");
  }
}

// Rank 1 gets a memory budget its forward cannot fit, rank 0 none. With agree_on_oom both
// trials end as out of memory at the same step and the group goes on working; without it
// (`agree` false) rank 0 waits in the gradient all-reduce for a rank that left, until the
// group's timeout.
void oom_one_rank(DistGroup& g, bool agree) {
  const auto data = testing::make_pattern_splits(512, 32);
  auto source = make_sample_source(data.train);
  TrainOptions o;
  o.batch_size = 256;
  o.steps = 3;
  o.optimizer = OptimizerKind::kSgd;
  o.evaluate = false;
  o.agree_on_oom = agree;
  auto memory = make_device_memory(c10::Device("cpu"), g.rank() == 1 ? int64_t{8} << 20 : 0);
  seed_everything(1);
  auto model = make_model("fmnist-cnn", {data.train.sample_shape(), data.train.num_classes});
  auto sync = make_data_parallel(g);
  LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.rank = g.rank();
  lo.world = g.world_size();
  const ProbeResult p = probe_once(
      [&] {
        Trainer trainer(*model, o, c10::Device("cpu"), memory.get(), sync.get());
        Loader loader(*source, lo);
        trainer.fit(loader, data);
      },
      *memory);
  EXPECT_OR_FAIL(p.outcome == ProbeOutcome::kOutOfMemory, "rank ", g.rank(),
                 ": the trial fit, expected out of memory");
  std::cout << "rank " << g.rank() << ": " << p.message << std::endl;
  // Every rank left the trial at the same point: the group still agrees.
  collectives(g);
}

// NCCL on this process's GPU: collectives on CUDA tensors, then training steps whose gradients
// go through the reducer's CUDA buckets and NCCL (a world of one on a one-GPU machine: the sum
// is the rank's own, so the steps are the plain ones).
void nccl(DistGroup& g, const c10::Device& device) {
  std::vector<at::Tensor> t = {torch::full({3}, static_cast<float>(g.rank() + 1), device)};
  g.allreduce_sum(t);
  const float want = static_cast<float>(g.world_size() * (g.world_size() + 1) / 2);
  EXPECT_OR_FAIL(t[0].eq(want).all().item<bool>(), "NCCL all-reduce gave ", t[0].cpu());
  std::vector<at::Tensor> b = {torch::full({2}, g.rank() == 0 ? 42.0f : -1.0f, device)};
  g.broadcast(b, 0);
  EXPECT_OR_FAIL(b[0].eq(42).all().item<bool>(), "NCCL broadcast gave ", b[0].cpu());
  g.barrier();
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  Run run;
  run.device = device;
  run.reduce_alone = true;
  const auto reduced = train(&g, run);
  const auto plain = train(nullptr, run);
  expect_close(reduced, plain, "fmnist-cnn on " + device.str() + " through NCCL buckets");
}

// Each rank trains its shard of the frozen problem of testing/noise_truth.h in batches of 128:
// the pair is one rank's gradient (128 samples) and the all-reduced one (128 × world); with 2
// micro-batches, the first micro-batch (64) and the all-reduced one.
void noise_scale(DistGroup& g) {
  const DatasetSplits data = testing::make_noisy_pattern_splits();
  auto model = testing::warmed_linear_model(data);
  const testing::NoiseTruth truth =
      testing::exact_noise(*model, data.train, data.normalize_mean, data.normalize_std);
  auto source = make_sample_source(data.train);
  for (int64_t accumulate : {1, 2}) {
    TrainOptions o = testing::sgd_steps(128, 800, /*lr=*/1e-30);
    o.momentum = 0;
    o.weight_decay = 0;
    o.accumulate = accumulate;
    // Without accumulation the pair is a collective, measured at every step whatever the
    // budget; with it each rank would thin its own steps to the budget: every step here, for
    // the estimate's precision.
    if (accumulate > 1) o.noise_scale_budget = 1;
    std::unique_ptr<GradientSync> sync = make_data_parallel(g, DataParallelOptions());
    LoaderOptions lo;
    lo.batch_size = o.batch_size;
    lo.seed = 5;
    lo.rank = g.rank();
    lo.world = g.world_size();
    lo.transform.mean = data.normalize_mean;
    lo.transform.std = data.normalize_std;
    Loader loader(*source, lo);
    Trainer trainer(*model, o, c10::Device(c10::kCPU), nullptr, sync.get());
    const TrainSummary summary = trainer.fit(loader, data);
    const NoiseScaleEstimate& e = summary.noise;
    EXPECT_OR_FAIL(summary.noise_measured_steps == 800, "accumulate ", accumulate, ": measured ",
                   summary.noise_measured_steps, " of 800 steps");
    const double want_small = accumulate == 1 ? 128 : 64;
    EXPECT_OR_FAIL(e.b_small == want_small && e.b_big == 128.0 * g.world_size(),
                   "accumulate ", accumulate, ": the pair is ", e.b_small, " vs ", e.b_big);
    EXPECT_OR_FAIL(std::abs(e.phi - truth.phi()) <= 0.1 * truth.phi(), "accumulate ", accumulate,
                   ": measured φ ", e.phi, ", truth ", truth.phi());
    std::cout << "rank " << g.rank() << " accumulate " << accumulate << ": φ " << e.phi
              << " (truth " << truth.phi() << ")" << std::endl;
  }
}

}  // namespace
}  // namespace saturate

namespace saturate {
namespace {

// One process's 5 plain-SGD steps of `model` on batches of 32 (the same on every rank): the
// losses, then the parameters by name.
struct Reference {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;
  EvalSums eval;  ///< of the trained model on eval_batch()
};

// `n` random samples and targets for `in`: images or vectors and classes, or token windows and
// the next tokens.
std::pair<at::Tensor, at::Tensor> random_samples(const ModelInputs& in, int64_t n) {
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), in.sample_shape.begin(), in.sample_shape.end());
  if (in.tokens)
    return {torch::randint(0, in.num_classes, shape, torch::kLong),
            torch::randint(0, in.num_classes, shape, torch::kLong)};
  return {torch::randn(shape), torch::randint(0, in.num_classes, {n})};
}

// 50 held-out samples: no M of the test divides them evenly.
std::pair<at::Tensor, at::Tensor> eval_batch(const ModelInputs& in) {
  torch::manual_seed(13);
  return random_samples(in, 50);
}

// 5 batches of 32 or 30 (which M = 4 and 8 split into micro-batches of two sizes), then an
// epoch's last, smaller batch of 3: fewer samples than most M.
std::vector<std::pair<at::Tensor, at::Tensor>> pipeline_batches(const ModelInputs& in) {
  torch::manual_seed(11);
  std::vector<std::pair<at::Tensor, at::Tensor>> batches;
  for (int i = 0; i < 5; ++i) batches.push_back(random_samples(in, i == 2 ? 30 : 32));
  batches.push_back(random_samples(in, 3));
  return batches;
}

Reference pipeline_reference(const std::string& name, const ModelInputs& in) {
  torch::manual_seed(7);
  auto model = make_model(name, in);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Reference ref;
  for (const auto& [x, y] : pipeline_batches(in)) {
    sgd.zero_grad();
    at::Tensor loss = mean_loss(model->forward(x), y);
    loss.backward();
    sgd.step();
    ref.losses.push_back(loss.item<double>());
  }
  for (auto& [n, p] : model->named_parameters()) ref.params[n] = p.detach().clone();
  model->train(false);
  const auto [xe, ye] = eval_batch(in);
  c10::InferenceMode inference;
  ref.eval = eval_sums(model->forward(xe), ye);
  return ref;
}

// With `shares` > 1 the GPT is split by tensor over that many ranks first, then into stages
// (the command line's layout: rank r is share r % T of stage r / T; each share's stages are a
// pipeline).
void pipeline(DistGroup& world, const std::string& name, int shares) {
  torch::set_num_threads(1);  // up to 4 ranks on 2 cores
  // The GPT on windows of 8 tokens of a 50-token vocabulary; the others on 28x28 images.
  const bool gpt = name.rfind("gpt", 0) == 0;
  const ModelInputs in = gpt ? ModelInputs{{8}, 50, true} : ModelInputs{{1, 28, 28}, 10, false};
  const Reference ref = pipeline_reference(name, in);
  const int stages = world.world_size() / shares, me = world.rank() / shares;
  std::vector<int> same_stage, same_share;
  for (int t = 0; t < shares; ++t) same_stage.push_back(me * shares + t);
  for (int s = 0; s < stages; ++s) same_share.push_back(s * shares + world.rank() % shares);
  std::unique_ptr<DistGroup> tensor_group, pipeline_group;
  std::unique_ptr<TensorParallelGroup> tp;
  if (shares > 1) {
    tensor_group = world.subgroup(same_stage, "test/stage" + std::to_string(me));
    tp = make_tensor_parallel_group(*tensor_group);
    pipeline_group = world.subgroup(same_share, "test/share" + std::to_string(world.rank() % shares));
  }
  DistGroup& g = shares > 1 ? *pipeline_group : world;
  for (PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B}) {
    for (int64_t micro : {1, 4, 8}) {
      torch::manual_seed(7);
      auto model = make_model(name, in);
      EXPECT_OR_FAIL(shares == 1 || model->set_tensor_parallel(tp.get()), name,
                     " refused tensor parallel");
      const auto spans = split_layers_evenly(model->pipeline_layers(), g.world_size());
      auto stage = model->pipeline_stage(spans[g.rank()].first, spans[g.rank()].second);
      torch::optim::SGD sgd(stage->parameters(), torch::optim::SGDOptions(0.1));
      PipelineStage pipe(g, *stage, {micro, schedule});
      const std::string what = to_string(schedule) + " M=" + std::to_string(micro);
      int64_t step = 0, most_held = 0;
      for (const auto& [x, y] : pipeline_batches(in)) {
        sgd.zero_grad();
        const PipelineStepStats st = pipe.forward_backward(x, y);
        sgd.step();
        most_held = std::max(most_held, st.most_held);
        const double want = ref.losses[static_cast<size_t>(step++)];
        EXPECT_OR_FAIL(std::abs(st.loss - want) <= 1e-5 * std::abs(want), what, ": step ", step,
                       " loss ", st.loss, ", one process ", want);
      }
      int64_t compared = 0;
      for (auto& [n, p] : stage->whole_named_parameters()) {  // a tensor split's shares gathered
        const at::Tensor& want = ref.params.at(n);
        EXPECT_OR_FAIL(p.sizes() == want.sizes(), what, ": ", n, " is ", p.sizes(),
                       ", one process's ", want.sizes());
        const double err = (p - want).abs().max().item<double>() /
                           std::max(1e-12, want.abs().max().item<double>());
        EXPECT_OR_FAIL(err <= 1e-5, what, ": stage ", g.rank(), " parameter ", n,
                       " differs from one process's by ", err, " (relative)");
        ++compared;
      }
      // Evaluation through the stages, forward only: the trained model's sums on held-out data.
      stage->train(false);
      const auto [xe, ye] = eval_batch(in);
      const EvalSums ev = pipe.evaluate(xe, ye);
      EXPECT_OR_FAIL(ev.units == ref.eval.units && ev.correct == ref.eval.correct &&
                         std::abs(ev.loss_sum - ref.eval.loss_sum) <= 1e-5 * ref.eval.loss_sum,
                     what, ": evaluation ", ev.loss_sum, " (", ev.correct, "/", ev.units,
                     " correct), one process ", ref.eval.loss_sum, " (", ref.eval.correct, "/",
                     ref.eval.units, ")");
      // 1F1B holds at most S - s micro-batches on stage s; GPipe all M.
      const int64_t cap = schedule == PipelineSchedule::kGPipe
                              ? micro
                              : std::min<int64_t>(micro, g.world_size() - g.rank());
      EXPECT_OR_FAIL(most_held == cap, what, ": stage ", g.rank(), " held ", most_held,
                     " micro-batches at once, expected ", cap);
      std::cout << "rank " << world.rank() << " " << what << ": layers [" << spans[g.rank()].first
                << ", " << spans[g.rank()].second << "), " << compared
                << " parameters equal to one process's" << std::endl;
    }
  }
}

// Each of `got` within `tolerance` (relative to the largest element) of `whole`'s parameter of
// its name.
void expect_near_by_name(Model& whole, const std::vector<std::pair<std::string, at::Tensor>>& got,
                         double tolerance) {
  std::map<std::string, at::Tensor> ref;
  for (auto& [n, p] : whole.named_parameters()) ref[n] = p.detach();
  for (const auto& [n, p] : got) {
    const at::Tensor& w = ref.at(n);
    const double err = (p - w).abs().max().item<double>() / std::max(1e-12, w.abs().max().item<double>());
    EXPECT_OR_FAIL(err <= tolerance, "parameter ", n, " differs from one process's by ", err);
  }
}

// fp16 with its loss scaler through the trainer over 2 pipeline stages (the command line takes
// fp16 on a GPU only; the trainer runs it on the CPU too): the last stage scales each
// micro-batch's loss and the stages agree on the skips. A first scale of 2^24 overflows the
// fp16 gradients, so the first steps skip and halve it until it fits: the stages skip the same
// steps as one process accumulating the same micro-batches, keep its scale, and end with its
// parameters.
void pipeline_fp16(DistGroup& g) {
  torch::set_num_threads(1);
  const DatasetSplits data = testing::make_pattern_splits(256, 64);
  TrainOptions o = testing::sgd_steps(/*batch_size=*/32, /*steps=*/24, /*lr=*/0.05);
  o.precision = Precision::kFp16;
  o.scaler.init_scale = std::ldexp(1.0, 24);
  const ModelInputs in{data.train.sample_shape(), data.train.num_classes};
  // The reference accumulates the same 4 micro-batches: fp16 gradients of a whole batch of 32
  // overflow at a scale where those of 8 samples do not.
  TrainOptions reference = o;
  reference.accumulate = 4;
  seed_everything(5);
  auto whole = make_model("mlp", in);
  MemorySink one;
  Trainer(*whole, reference, c10::Device("cpu")).fit(data, &one);
  seed_everything(5);
  auto model = make_model("mlp", in);
  const auto spans = split_layers_evenly(model->pipeline_layers(), g.world_size());
  auto stage = model->pipeline_stage(spans[g.rank()].first, spans[g.rank()].second);
  auto step = make_pipeline_step(g, *stage, {4, PipelineSchedule::k1F1B}, nullptr);
  Trainer trainer(*stage, o, c10::Device("cpu"));
  trainer.set_staged_step(step.get());
  MemorySink staged;
  trainer.fit(data, &staged);
  const auto& a = one.records();
  const auto& b = staged.records();
  EXPECT_OR_FAIL(a.size() == b.size(), b.size(), " steps staged, ", a.size(), " in one process");
  int64_t skipped = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_OR_FAIL(a[i].is_skipped == b[i].is_skipped && a[i].loss_scale == b[i].loss_scale,
                   "step ", i + 1, ": stage ", g.rank(), " skipped ", b[i].is_skipped, " at scale ",
                   b[i].loss_scale, ", one process ", a[i].is_skipped, " at ", a[i].loss_scale);
    skipped += a[i].is_skipped ? 1 : 0;
  }
  EXPECT_OR_FAIL(skipped > 0 && skipped < static_cast<int64_t>(a.size()), skipped, " of ", a.size(),
                 " steps skipped: the test needs some skipped and some taken");
  expect_near_by_name(*whole, stage->named_parameters(), 1e-3);
  std::cout << "rank " << g.rank() << " fp16 pipeline: " << skipped << " of " << a.size()
            << " steps skipped, scale " << b.back().loss_scale << ", as one process" << std::endl;
}

// Tensor parallel (issue 19): the GPT's heads and MLP columns split over the ranks take 5 SGD
// steps to one process's losses and, gathered, its parameters (1e-5 relative); a model that
// cannot be split says so.
void tensor_parallel(DistGroup& g) {
  torch::set_num_threads(1);
  const ModelInputs in{{16}, 50, true};
  const std::string spec = "gpt-mini:layers=2,heads=4,width=32,context=16";
  torch::manual_seed(11);
  std::vector<std::pair<at::Tensor, at::Tensor>> batches;
  for (int i = 0; i < 5; ++i)
    batches.emplace_back(torch::randint(0, 50, {8, 16}), torch::randint(0, 50, {8, 16}));
  auto train = [&](Model& model, std::vector<double>& losses) {
    torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1));
    for (const auto& [x, y] : batches) {
      sgd.zero_grad();
      at::Tensor loss = mean_loss(model.forward(x), y);
      loss.backward();
      sgd.step();
      losses.push_back(loss.item<double>());
    }
  };
  torch::manual_seed(7);
  auto whole = make_model(spec, in);
  std::vector<double> want;
  train(*whole, want);
  torch::manual_seed(7);
  auto split = make_model(spec, in);
  auto tp = make_tensor_parallel_group(g);
  EXPECT_OR_FAIL(split->set_tensor_parallel(tp.get()), "the GPT refused tensor parallel");
  int64_t mine = 0, all = 0;
  for (const at::Tensor& p : split->parameters()) mine += p.numel();
  for (const at::Tensor& p : whole->parameters()) all += p.numel();
  EXPECT_OR_FAIL(mine < all, "rank ", g.rank(), " holds ", mine, " of ", all, " parameters");
  std::vector<double> got;
  train(*split, got);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_OR_FAIL(std::abs(got[i] - want[i]) <= 1e-5 * std::abs(want[i]), "step ", i + 1,
                   " loss ", got[i], ", one process ", want[i]);
  std::map<std::string, at::Tensor> ref;
  for (auto& [n, p] : whole->named_parameters()) ref[n] = p.detach();
  int64_t compared = 0;
  for (auto& [n, p] : split->whole_named_parameters()) {
    const at::Tensor& w = ref.at(n);
    EXPECT_OR_FAIL(p.sizes() == w.sizes(), n, " gathered as ", p.sizes(), ", one process ", w.sizes());
    const double err = (p - w).abs().max().item<double>() / std::max(1e-12, w.abs().max().item<double>());
    EXPECT_OR_FAIL(err <= 1e-5, "parameter ", n, " differs from one process's by ", err);
    ++compared;
  }
  auto cnn = make_model("fmnist-cnn", {{1, 28, 28}, 10, false});
  EXPECT_OR_FAIL(!cnn->set_tensor_parallel(tp.get()), "fmnist-cnn took tensor parallel");
  std::cout << "rank " << g.rank() << " tensor parallel: " << mine << " of " << all
            << " parameters here, " << compared << " gathered equal to one process's" << std::endl;
}

// Fixed batches, one epoch of them.
class FixedBatches final : public BatchSource {
 public:
  explicit FixedBatches(std::vector<Batch> batches) : batches_(std::move(batches)) {}
  void start_epoch(int64_t) override { next_ = 0; }
  std::optional<Batch> next() override {
    if (next_ >= batches_.size()) return std::nullopt;
    return batches_[next_++];
  }
  int64_t batches_per_epoch() const override { return static_cast<int64_t>(batches_.size()); }

 private:
  std::vector<Batch> batches_;
  size_t next_ = 0;
};

// fp16 with a tensor split, through the trainer (the command line takes fp16 on a GPU only):
// an overflow in one share's weight gradient stays in that share (it does not reach the input's
// gradient, which the backward's all-reduce would carry), so the shares must add up their
// counts of non-finite gradients. The GPT is made so: share 1's MLP hidden units are 100 times
// larger and its output columns 1000 times smaller, so at the first scale (2^18) the gradient of
// share 1's columns of the MLP's output weight overflows fp16 and nothing else does (checked
// first in one process). Both shares skip the steps one process skips (the first 3 of 6, each
// halving the scale), take the rest to its parameters (1e-3), and end with the same whole
// tensors. Without the sum share 0 takes the first step alone.
void tensor_parallel_fp16(DistGroup& g) {
  torch::set_num_threads(1);
  const ModelInputs in{{16}, 50, true};
  const std::string spec = "gpt-mini:layers=1,heads=2,width=32,context=16";
  const int64_t hidden = 4 * 32, half = hidden / 2;
  auto crafted = [&] {
    torch::manual_seed(7);
    auto m = make_model(spec, in);
    torch::NoGradGuard no_grad;
    for (auto& [n, p] : m->named_parameters()) {
      if (n == "h.0.mlp.c_fc.weight") p.slice(0, half, hidden).mul_(100);
      if (n == "h.0.mlp.c_proj.weight") p.slice(1, half, hidden).mul_(1e-3);
    }
    return m;
  };
  torch::manual_seed(11);
  std::vector<Batch> batches;
  for (int i = 0; i < 6; ++i)
    batches.push_back({torch::randint(0, 50, {8, 16}), torch::randint(0, 50, {8, 16}), 8});
  TrainOptions o = testing::sgd_steps(/*batch_size=*/8, /*steps=*/6, /*lr=*/0.05);
  o.precision = Precision::kFp16;
  o.scaler.init_scale = std::ldexp(1.0, 18);
  o.evaluate = false;
  DatasetSplits data;
  data.train.inputs = torch::zeros({48, 16}, torch::kLong);
  data.train.targets = torch::zeros({48, 16}, torch::kLong);
  data.train.num_classes = 50;
  {  // The bad case is real: one process's first scaled gradient overflows in share 1's part only.
    auto m = crafted();
    at::Tensor loss;
    {
      AutocastScope autocast(Precision::kFp16, c10::kCPU);
      loss = mean_loss(m->forward(batches[0].inputs), batches[0].targets);
    }
    (loss * o.scaler.init_scale).backward();
    for (auto& [n, p] : m->named_parameters()) {
      const bool proj = n == "h.0.mlp.c_proj.weight";
      const at::Tensor finite = proj ? p.grad().slice(1, 0, half) : p.grad();
      EXPECT_OR_FAIL(torch::isfinite(finite).all().item<bool>(), n, "'s gradient overflows too");
      if (proj)
        EXPECT_OR_FAIL(!torch::isfinite(p.grad().slice(1, half, hidden)).all().item<bool>(),
                       "share 1's columns of ", n, " do not overflow: the case is not made");
    }
  }
  auto whole = crafted();
  MemorySink one;
  FixedBatches whole_batches(batches);
  Trainer(*whole, o, c10::Device("cpu")).fit(whole_batches, data, &one);
  auto split = crafted();
  auto tp = make_tensor_parallel_group(g);
  EXPECT_OR_FAIL(split->set_tensor_parallel(tp.get()), "the GPT refused tensor parallel");
  MemorySink shares;
  FixedBatches split_batches(batches);
  Trainer(*split, o, c10::Device("cpu")).fit(split_batches, data, &shares);
  const auto& a = one.records();
  const auto& b = shares.records();
  EXPECT_OR_FAIL(a.size() == b.size() && !a.empty(), b.size(), " steps split, ", a.size(), " in one");
  EXPECT_OR_FAIL(a[0].is_skipped, "one process did not skip the first step");
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_OR_FAIL(a[i].is_skipped == b[i].is_skipped && a[i].loss_scale == b[i].loss_scale,
                   "step ", i + 1, ": share ", g.rank(), " skipped ", b[i].is_skipped, " at scale ",
                   b[i].loss_scale, ", one process ", a[i].is_skipped, " at ", a[i].loss_scale);
  std::vector<at::Tensor> whole_here;
  const std::vector<at::Tensor> own = split->tensor_parallel_shares();
  for (const at::Tensor& p : split->parameters())
    if (std::none_of(own.begin(), own.end(), [&](const at::Tensor& s) { return s.is_same(p); }))
      whole_here.push_back(p.detach().clone());
  EXPECT_OR_FAIL(!own.empty() && whole_here.size() > own.size(), own.size(), " shares, ",
                 whole_here.size(), " whole tensors");
  expect_same_on_every_rank(g, whole_here, "the whole tensors after fp16 steps");
  expect_near_by_name(*whole, split->whole_named_parameters(), 1e-3);
  int64_t skipped = 0;
  for (const auto& r : b) skipped += r.is_skipped ? 1 : 0;
  EXPECT_OR_FAIL(skipped < static_cast<int64_t>(b.size()), "every step skipped: none compared");
  std::cout << "rank " << g.rank() << " fp16 tensor parallel: " << skipped << " of " << b.size()
            << " steps skipped as one process, scale " << b.back().loss_scale << std::endl;
}

}  // namespace
}  // namespace saturate

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a dead peer's socket must be an error, not a signal
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  const double timeout_s = argc > 2 ? std::atof(argv[2]) : 30.0;
  try {
    const saturate::DistEnv env = saturate::dist_env_from_environment();
    const bool on_gpu = mode == "nccl";
    if (on_gpu && !torch::cuda::is_available()) {
      std::cout << "skipped: no CUDA device" << std::endl;
      return 77;
    }
    const c10::Device device = on_gpu ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank))
                                      : c10::Device(c10::kCPU);
    auto g = saturate::init_process_group(
        env, on_gpu ? saturate::DistBackend::kNccl : saturate::DistBackend::kGloo, device,
        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    if (mode == "collectives") saturate::collectives(*g);
    else if (mode == "equivalence") saturate::equivalence(*g);
    else if (mode == "equivalence_batchnorm") saturate::equivalence_batchnorm(*g);
    else if (mode == "nccl") saturate::nccl(*g, device);
    else if (mode == "oom_one_rank") saturate::oom_one_rank(*g, true);
    else if (mode == "noise_scale") saturate::noise_scale(*g);
    else if (mode == "oom_one_rank_unagreed") saturate::oom_one_rank(*g, false);
    else if (mode == "pipeline")
      saturate::pipeline(*g, argc > 3 ? argv[3] : "fmnist-cnn", argc > 4 ? std::atoi(argv[4]) : 1);
    else if (mode == "tensor_parallel") saturate::tensor_parallel(*g);
    else if (mode == "pipeline_fp16") saturate::pipeline_fp16(*g);
    else if (mode == "tensor_parallel_fp16") saturate::tensor_parallel_fp16(*g);
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
