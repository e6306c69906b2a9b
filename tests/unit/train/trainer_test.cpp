// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/trainer.h"

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/data/batch_iterator.h"
#include "saturate/device/threads.h"
#include "saturate/models/model.h"
#include "saturate/telemetry/phase_timer.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/train/gradient_sync.h"
#include "testing/pattern_dataset.h"
#include "testing/sgd_steps.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

TrainOptions small_run(int64_t steps) {
  TrainOptions o;
  o.batch_size = 32;
  o.steps = steps;
  o.lr = 3e-3;
  o.timing_warmup_steps = 2;
  o.eval_batch_size = 128;
  return o;
}

struct RunResult {
  TrainSummary summary;
  std::vector<StepRecord> records;
};

RunResult run(const std::string& model_spec, const TrainOptions& o, const DatasetSplits& data,
              const std::atomic<bool>* stop = nullptr) {
  seed_everything(o.seed);
  auto model = make_model(model_spec, {data.train.sample_shape(), data.train.num_classes});
  Trainer trainer(*model, o, c10::Device("cpu"));
  MemorySink sink;
  RunResult r;
  r.summary = trainer.fit(data, &sink, stop);
  r.records = sink.records();
  return r;
}

double mean_loss(const std::vector<StepRecord>& r, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += r[i].loss;
  return s / static_cast<double>(end - begin);
}

}  // namespace

TEST(Trainer, LearnsALearnableDataset) {
  const auto data = testing::make_pattern_splits(512, 256);
  const RunResult r = run("mlp", small_run(60), data);
  EXPECT_EQ(r.summary.steps, 60);
  EXPECT_EQ(r.summary.samples, 60 * 32);
  EXPECT_GT(r.summary.test_accuracy, 0.9);
  EXPECT_LT(mean_loss(r.records, 50, 60), 0.5 * mean_loss(r.records, 0, 10));
  EXPECT_GT(r.summary.samples_per_s, 0.0);
}

TEST(Trainer, SameSeedGivesTheSameRunTwice) {
  const auto data = testing::make_pattern_splits(256, 128);
  TrainOptions o = small_run(20);
  o.seed = 42;
  const RunResult a = run("fmnist-cnn", o, data);
  const RunResult b = run("fmnist-cnn", o, data);
  ASSERT_EQ(a.records.size(), b.records.size());
  for (size_t i = 0; i < a.records.size(); ++i)
    EXPECT_EQ(a.records[i].loss, b.records[i].loss) << "step " << i;
  EXPECT_EQ(a.summary.test_accuracy, b.summary.test_accuracy);
  o.seed = 43;
  const RunResult c = run("fmnist-cnn", o, data);
  EXPECT_NE(a.records[0].loss, c.records[0].loss);
}

TEST(Trainer, PhasesAccountForTheWholeStep) {
  const auto data = testing::make_pattern_splits(256, 64);
  const RunResult r = run("mlp", small_run(10), data);
  for (const auto& rec : r.records) {
    EXPECT_NEAR(phase_sum_ms(rec), rec.step_ms, 1e-9 + 1e-6 * rec.step_ms);
    EXPECT_GE(rec.data_wait_ms, 0.0);
    EXPECT_GT(rec.forward_ms, 0.0);
    EXPECT_GT(rec.backward_ms, 0.0);
    EXPECT_GT(rec.lr, 0.0);
    EXPECT_EQ(rec.samples, 32);
  }
}

TEST(Trainer, CrossesEpochBoundariesWithTheLastPartialBatch) {
  const auto data = testing::make_pattern_splits(80, 32);  // 32 + 32 + 16 per epoch
  TrainOptions o = small_run(0);
  o.epochs = 2;
  const RunResult r = run("mlp", o, data);
  ASSERT_EQ(r.summary.steps, 6);
  EXPECT_EQ(r.records[2].samples, 16);
  EXPECT_EQ(r.records[3].epoch, 1);
  EXPECT_DOUBLE_EQ(r.summary.epochs, 2.0);
}

TEST(Trainer, StopsAfterTheCurrentStepWhenAsked) {
  const auto data = testing::make_pattern_splits(256, 64);
  std::atomic<bool> stop{true};
  const RunResult r = run("mlp", small_run(50), data, &stop);
  EXPECT_TRUE(r.summary.is_interrupted);
  EXPECT_EQ(r.summary.steps, 0);
  EXPECT_TRUE(std::isnan(r.summary.test_accuracy));
}

TEST(Trainer, TorchScriptFixtureTrainsAndItsLossFalls) {
  const std::string path = testing::fixtures_dir() + "/tiny_cnn.pt";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) GTEST_SKIP() << "fixture " << path << " was not generated";
  const auto data = testing::make_pattern_splits(512, 128, /*classes=*/10);  // the fixture's 10
  TrainOptions o = small_run(40);
  o.lr = 1e-2;
  const RunResult r = run(path, o, data);
  EXPECT_LT(mean_loss(r.records, 30, 40), 0.7 * mean_loss(r.records, 0, 10));
  EXPECT_GT(r.summary.test_accuracy, 0.5);
}

TEST(Trainer, EvaluateRestoresTrainingMode) {
  const auto data = testing::make_pattern_splits(64, 64);
  auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
  Trainer trainer(*model, small_run(1), c10::Device("cpu"));
  model->train(true);
  const EvalResult ev = trainer.evaluate(data.test, data.normalize_mean, data.normalize_std);
  EXPECT_TRUE(model->is_training());
  EXPECT_EQ(ev.samples, 64);
  EXPECT_GE(ev.accuracy, 0.0);
  EXPECT_LE(ev.accuracy, 1.0);
}

TEST(SteadySamplesPerS, ExcludesWarmupSteps) {
  std::vector<StepRecord> rs(4);
  for (auto& r : rs) r.samples = 10;
  rs[0].step_ms = 1000;  // slow first step
  rs[1].step_ms = rs[2].step_ms = rs[3].step_ms = 10;
  EXPECT_DOUBLE_EQ(steady_samples_per_s(rs, 1), 1000.0);
  EXPECT_NEAR(steady_samples_per_s(rs, 0), 40.0 / 1.030, 1e-9);
  EXPECT_NEAR(steady_samples_per_s(rs, 10), 40.0 / 1.030, 1e-9);  // too few: use all
}

}  // namespace saturate

namespace saturate {

// Issue 3: K micro-batches give the same update as one batch of the same samples. With plain
// SGD (no momentum, no weight decay, constant LR) one step moves each parameter by -lr * grad,
// so equal parameters after the step mean equal gradients.
TEST(Trainer, AccumulatedMicroBatchesMatchOneBigBatch) {
  const auto data = testing::make_pattern_splits(256, 32);
  auto one_step = [&](int64_t accumulate) {
    // 4 micro-batches of 15; 7 of 9,9,...,6 exercise an uneven split.
    TrainOptions o = testing::sgd_steps(/*batch_size=*/60, /*steps=*/1, /*lr=*/0.5);
    o.momentum = 0.0;
    o.weight_decay = 0.0;
    o.accumulate = accumulate;
    seed_everything(3);
    auto model = make_model("fmnist-cnn", {data.train.sample_shape(), data.train.num_classes});
    Trainer trainer(*model, o, c10::Device("cpu"));
    trainer.fit(data);
    std::vector<at::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  };
  const auto whole = one_step(1);
  for (int64_t k : {4, 7}) {
    const auto split = one_step(k);
    ASSERT_EQ(whole.size(), split.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      const double max_abs = (whole[i] - split[i]).abs().max().item<double>();
      const double scale = whole[i].abs().max().item<double>();
      // fp32 sums in a different order: agreement to ~1e-6 of the parameter scale.
      EXPECT_LE(max_abs, 1e-5 * std::max(1.0, scale))
          << "accumulate " << k << ", parameter " << i << ": max abs diff " << max_abs;
    }
  }
}

TEST(Trainer, Issue16_ClipsTheGlobalGradientNormAndRecordsIt) {
  // One plain-SGD step at lr 1 moves the parameters by minus the applied gradient: unclipped
  // its norm is the recorded grad_norm; clipped to c below that, it is c, in the same direction.
  const auto data = testing::make_pattern_splits(256, 32);
  auto one_step = [&](double clip, double* grad_norm) {
    TrainOptions o = testing::sgd_steps(/*batch_size=*/32, /*steps=*/1, /*lr=*/1.0);
    o.momentum = 0.0;
    o.weight_decay = 0.0;
    o.clip_grad_norm = clip;
    seed_everything(5);
    auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
    std::vector<at::Tensor> before;
    for (const auto& p : model->parameters()) before.push_back(p.detach().clone());
    Trainer trainer(*model, o, c10::Device("cpu"));
    MemorySink sink;
    trainer.fit(data, &sink);
    *grad_norm = sink.records().at(0).grad_norm;
    std::vector<at::Tensor> delta;
    const auto after = model->parameters();
    for (size_t i = 0; i < after.size(); ++i) delta.push_back((before[i] - after[i]).flatten());
    return torch::cat(delta);
  };
  double norm = 0, norm_clipped = 0;
  const at::Tensor free = one_step(0.0, &norm);
  ASSERT_GT(norm, 0.0);
  EXPECT_NEAR(free.norm().item<double>(), norm, 1e-4 * norm);
  const double clip = norm / 4;
  const at::Tensor clipped = one_step(clip, &norm_clipped);
  EXPECT_NEAR(norm_clipped, norm, 1e-6 * norm);  // the norm before clipping
  EXPECT_NEAR(clipped.norm().item<double>(), clip, 1e-4 * clip);
  EXPECT_LE((clipped - free * (clip / (norm + 1e-6))).abs().max().item<double>(), 1e-6);
  // A limit above the norm changes nothing.
  double unused = 0;
  EXPECT_TRUE(torch::equal(one_step(norm * 2, &unused), free));
  TrainOptions bad;
  bad.clip_grad_norm = -1;
  EXPECT_THROW(bad.validate(), Error);
}

TEST(Trainer, Bf16AndRecomputedRunsTrainToo) {
  const auto data = testing::make_pattern_splits(512, 128);
  TrainOptions o = small_run(40);
  o.precision = Precision::kBf16;
  o.recompute_segments = 2;
  const RunResult r = run("fmnist-cnn", o, data);
  EXPECT_GT(r.summary.test_accuracy, 0.9);
  EXPECT_EQ(r.summary.skipped_steps, 0);
  EXPECT_DOUBLE_EQ(r.summary.loss_scale, 1.0);
}

}  // namespace saturate

namespace saturate {
namespace {

// Issue 4: an input pipeline that takes 100 ms per batch: far slower than the step's compute
// even when other tests load both cores.
class SlowSource : public BatchSource {
 public:
  SlowSource(const TensorDataset& data, BatchIteratorOptions o) : inner_(data, o) {}
  void start_epoch(int64_t epoch) override { inner_.start_epoch(epoch); }
  std::optional<Batch> next() override {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return inner_.next();
  }
  int64_t batches_per_epoch() const override { return inner_.batches_per_epoch(); }

 private:
  BatchIterator inner_;
};

// Issue 4: a model whose optimizer step dwarfs its forward and backward: a tiny linear layer
// plus an 8M-parameter tensor that enters the loss through one element only.
class HeavyOptimizerModel : public Model {
 public:
  // 64 parameters of 2 MiB each that the forward barely uses: the backward writes each gradient
  // once, and AdamW, even as one fused kernel, makes seven passes over them. (Blocks this size
  // come from the heap again each step; a single 128 MiB block would be mapped afresh each step,
  // and its page faults would land in the backward.)
  HeavyOptimizerModel() : linear_(784, 4) {
    for (int i = 0; i < 64; ++i) big_.push_back(torch::zeros({1 << 19}, torch::requires_grad()));
  }
  std::string name() const override { return "heavy-optimizer"; }
  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor y = linear_->forward(x.flatten(1));
    for (const auto& b : big_) y = y + b.narrow(0, 0, 1);
    return y;
  }
  std::vector<at::Tensor> parameters() override {
    auto p = linear_->parameters();
    p.insert(p.end(), big_.begin(), big_.end());
    return p;
  }
  std::vector<at::Tensor> state_tensors() override { return parameters(); }
  void train(bool on) override { linear_->train(on); }
  bool is_training() const override { return linear_->is_training(); }
  void to(const c10::Device& d) override { linear_->to(d); }

 private:
  torch::nn::Linear linear_;
  std::vector<at::Tensor> big_;
};

// One intra-op thread while a phase-timing test runs: ctest runs tests two at a time, and two
// processes spinning OpenMP teams on two cores inflate compute phases tenfold.
class SingleThread {
 public:
  SingleThread() : saved_(at::get_num_threads()) { at::set_num_threads(1); }
  ~SingleThread() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

}  // namespace

TEST(Trainer, Issue4_SlowDataShowsUpAsDataWait) {
  SingleThread one_thread;
  const auto data = testing::make_pattern_splits(256, 32);
  TrainOptions o = small_run(6);
  o.evaluate = false;
  BatchIteratorOptions it;
  it.batch_size = o.batch_size;
  it.normalize_mean = data.normalize_mean;
  it.normalize_std = data.normalize_std;
  SlowSource slow(data.train, it);
  auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
  Trainer trainer(*model, o, c10::Device("cpu"));
  MemorySink sink;
  trainer.fit(slow, data, &sink);
  ASSERT_EQ(sink.records().size(), 6u);
  for (const auto& r : sink.records()) {
    EXPECT_GE(r.data_wait_ms, 100.0);
    EXPECT_GT(r.data_wait_ms, r.forward_ms + r.backward_ms + r.optimizer_ms);
    EXPECT_NEAR(phase_sum_ms(r), r.step_ms, 1e-6 * r.step_ms);
  }
}

TEST(Trainer, Issue4_SlowOptimizerShowsUpAsOptimizerTime) {
  SingleThread one_thread;
  // As the command sets it: freed gradients stay in the heap, or the backward would fault in
  // 128 MiB of fresh pages each step.
  configure_host_allocator();
  const auto data = testing::make_pattern_splits(128, 32);
  TrainOptions o = small_run(6);
  o.evaluate = false;
  HeavyOptimizerModel model;
  Trainer trainer(model, o, c10::Device("cpu"));
  MemorySink sink;
  trainer.fit(data, &sink);
  // Step 0 also allocates AdamW's state; step 1 first takes the gradients' blocks from the heap.
  for (size_t i = 2; i < sink.records().size(); ++i) {
    const auto& r = sink.records()[i];
    EXPECT_GT(r.optimizer_ms, r.forward_ms + r.backward_ms + r.data_wait_ms) << "step " << i;
    EXPECT_GT(r.optimizer_ms, 0.5 * r.step_ms) << "step " << i;
  }
}

}  // namespace saturate

namespace saturate {
namespace {

// Times with the host clock but releases a step only `lag` finished steps later, as CUDA events
// do when the device runs behind the host.
class LaggingTimer : public PhaseTimer {
 public:
  explicit LaggingTimer(int64_t lag) : lag_(lag) {}
  void begin() override { inner_->begin(); }
  void mark(Phase p) override { inner_->mark(p); }
  int64_t finish() override {
    ++finished_;
    return inner_->finish();
  }
  bool ready(int64_t ticket) override { return finished_ - 1 - ticket >= lag_; }
  void read(int64_t ticket, StepRecord& r) override {
    if (!ready(ticket)) ++early_reads;
    inner_->read(ticket, r);
  }
  std::string clock_name() const override { return "lagging"; }
  int64_t early_reads = 0;

 private:
  std::unique_ptr<PhaseTimer> inner_ = make_steady_phase_timer();
  int64_t lag_;
  int64_t finished_ = 0;
};

}  // namespace

TEST(Trainer, Issue4_LateTimingStillGivesEveryRecordInOrderWithItsLoss) {
  const auto data = testing::make_pattern_splits(256, 64);
  TrainOptions o = small_run(12);
  o.evaluate = false;
  const RunResult steady = run("mlp", o, data);
  for (int64_t lag : {1, 2, 1000}) {
    SCOPED_TRACE(lag);
    seed_everything(o.seed);
    auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
    Trainer trainer(*model, o, c10::Device("cpu"));
    auto timer = std::make_unique<LaggingTimer>(lag);
    LaggingTimer* lagging = timer.get();
    trainer.set_phase_timer(std::move(timer));
    EXPECT_EQ(trainer.phase_timer().clock_name(), "lagging");
    MemorySink sink;
    const TrainSummary s = trainer.fit(data, &sink);
    ASSERT_EQ(sink.records().size(), 12u);
    EXPECT_EQ(s.steps, 12);
    for (size_t i = 0; i < sink.records().size(); ++i) {
      const StepRecord& r = sink.records()[i];
      EXPECT_EQ(r.step, static_cast<int64_t>(i));
      EXPECT_EQ(r.loss, steady.records[i].loss) << "step " << i;
      EXPECT_NEAR(phase_sum_ms(r), r.step_ms, 1e-9 + 1e-6 * r.step_ms);
      if (i > 0) {
        EXPECT_GT(r.start_ms, sink.records()[i - 1].start_ms);
      }
    }
    EXPECT_NEAR(s.final_loss, steady.summary.final_loss, 1e-12);
    // A device that never catches up is read anyway once a few steps are in flight, and at the
    // end; one that lags by a step or two is waited for only at the end of the run.
    if (lag <= 2) {
      EXPECT_EQ(lagging->early_reads, lag);
    } else {
      EXPECT_EQ(lagging->early_reads, 12);
    }
  }
}

}  // namespace saturate

namespace saturate {
namespace {
class EvalSink : public TelemetrySink {
 public:
  void on_step(const StepRecord&) override {}
  void on_eval(int64_t step, const std::string& metric, double value) override {
    evals.push_back({step, metric, value});
  }
  struct Eval {
    int64_t step;
    std::string metric;
    double value;
  };
  std::vector<Eval> evals;
};
}  // namespace

TEST(Trainer, Issue13_EvaluatesTheValidationSplitEveryNStepsAndAtTheEnd) {
  DatasetSplits data = testing::make_pattern_splits(512, 128);
  data.validation = data.test;
  data.validation.name = "validation";
  TrainOptions o = small_run(20);
  o.eval_every = 8;
  seed_everything(o.seed);
  auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
  Trainer trainer(*model, o, c10::Device("cpu"));
  EvalSink sink;
  const TrainSummary s = trainer.fit(data, &sink);
  std::vector<std::pair<int64_t, std::string>> got;
  for (const auto& e : sink.evals) got.push_back({e.step, e.metric});
  const std::vector<std::pair<int64_t, std::string>> want = {
      {8, "val_accuracy"},  {8, "val_loss"},       {16, "val_accuracy"}, {16, "val_loss"},
      {20, "val_accuracy"}, {20, "val_loss"},      {20, "test_accuracy"}, {20, "test_loss"}};
  EXPECT_EQ(got, want);
  EXPECT_FALSE(std::isnan(s.val_accuracy));
  // The validation split is the test split here: the same model, the same numbers.
  EXPECT_DOUBLE_EQ(s.val_accuracy, s.test_accuracy);
}

// Issue 34 (defect 4): `train --no-eval --eval-every N` evaluated every N steps anyway, and so
// did every tune trial of a recipe with --eval-every (trials run with evaluate off).
TEST(Trainer, Issue34_NoEvaluationMeansNoPeriodicEvaluationEither) {
  DatasetSplits data = testing::make_pattern_splits(256, 64);
  data.validation = data.test;
  TrainOptions o = small_run(12);
  o.eval_every = 4;
  o.evaluate = false;
  seed_everything(o.seed);
  auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
  Trainer trainer(*model, o, c10::Device("cpu"));
  EvalSink sink;
  trainer.fit(data, &sink);
  EXPECT_TRUE(sink.evals.empty()) << sink.evals.size() << " evaluations, the first at step "
                                  << sink.evals.front().step;
}

}  // namespace saturate

namespace saturate {

// Issue 14: channels-last is the same math in another order. One plain-SGD step from the same
// weights lands on the same weights (to fp32 reordering), and the conv weights stay NHWC.
TEST(Trainer, Issue14_ChannelsLastTakesTheSameStepInAnotherLayout) {
  const auto data = testing::make_pattern_splits(256, 32);
  auto one_step = [&](MemoryFormat format, std::vector<at::Tensor>* live) {
    TrainOptions o = testing::sgd_steps(/*batch_size=*/48, /*steps=*/2, /*lr=*/0.1);
    o.memory_format = format;
    seed_everything(5);
    auto model = make_model("fmnist-cnn", {data.train.sample_shape(), data.train.num_classes});
    Trainer trainer(*model, o, c10::Device("cpu"));
    const TrainSummary s = trainer.fit(data);
    EXPECT_EQ(s.steps, 2);
    std::vector<at::Tensor> out;
    for (const auto& p : model->parameters()) {
      out.push_back(p.detach().clone(at::MemoryFormat::Contiguous));
      if (live) live->push_back(p.detach());
    }
    // Evaluation runs in the same layout.
    const EvalResult ev = trainer.evaluate(data.test, data.normalize_mean, data.normalize_std);
    EXPECT_EQ(ev.samples, 32);
    return out;
  };
  std::vector<at::Tensor> nhwc_live;
  const auto nchw = one_step(MemoryFormat::kContiguous, nullptr);
  const auto nhwc = one_step(MemoryFormat::kChannelsLast, &nhwc_live);
  ASSERT_EQ(nchw.size(), nhwc.size());
  int checked = 0;
  for (size_t i = 0; i < nchw.size(); ++i) {
    const double diff = (nchw[i] - nhwc[i]).abs().max().item<double>();
    const double scale = nchw[i].abs().max().item<double>();
    EXPECT_LE(diff, 1e-5 * std::max(1.0, scale)) << "parameter " << i;
    const at::Tensor& p = nhwc_live[i];
    if (p.dim() == 4 && p.size(1) > 1) {  // one input channel is both layouts at once
      EXPECT_TRUE(p.is_contiguous(at::MemoryFormat::ChannelsLast)) << "parameter " << i;
      EXPECT_FALSE(p.is_contiguous()) << "parameter " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 1);  // fmnist-cnn's second convolution (64x32x3x3)
}

TEST(Trainer, Issue14_ChannelsLastRefusesBatchesThatAreNotImages) {
  // The same samples as [N, 784] vectors: an MLP trains on them, but there is no channel axis
  // to put last.
  auto data = testing::make_pattern_splits(128, 32);
  data.train.inputs = data.train.inputs.reshape({data.train.size(), -1});
  data.test.inputs = data.test.inputs.reshape({data.test.size(), -1});
  TrainOptions o = small_run(2);
  o.evaluate = false;
  auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
  {
    Trainer flat(*model, o, c10::Device("cpu"));
    EXPECT_EQ(flat.fit(data).steps, 2);
  }
  o.memory_format = MemoryFormat::kChannelsLast;
  Trainer trainer(*model, o, c10::Device("cpu"));
  try {
    trainer.fit(data);
    FAIL() << "channels-last trained on 2-D batches";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--memory-format channels-last needs image batches"),
              std::string::npos)
        << e.what();
  }
}

TEST(Trainer, Issue14_AModelWrittenForNchwFailsInChannelsLast) {
  // view() of a conv output needs NCHW order: the fixture trains contiguous and fails in
  // channels-last, which is why tune measures a layout before it takes it.
  const std::string path = testing::fixtures_dir() + "/view_cnn.pt";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) GTEST_SKIP() << "fixture " << path << " was not generated";
  const auto data = testing::make_pattern_splits(128, 32, /*classes=*/10);
  TrainOptions o = small_run(2);
  o.evaluate = false;
  EXPECT_EQ(run(path, o, data).summary.steps, 2);
  o.memory_format = MemoryFormat::kChannelsLast;
  try {
    run(path, o, data);
    FAIL() << "view() of a channels-last conv output ran";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot run in --memory-format channels-last (view size"),
              std::string::npos) << what;
    EXPECT_NE(what.find("use --memory-format contiguous"), std::string::npos) << what;
  }
}

}  // namespace saturate

namespace saturate {
namespace {

// One rank of a pretend data-parallel job: sum_across_ranks adds what the other rank reported.
class FakeRankSync : public GradientSync {
 public:
  FakeRankSync(int rank, std::vector<double> other) : rank_(rank), other_(std::move(other)) {}
  void attach(Model&) override {}
  void before_forward(bool) override {}
  void before_backward(bool) override {}
  int world_size() const override { return 2; }
  int rank() const override { return rank_; }
  void sum_across_ranks(std::vector<double>& values) override {
    mine = values;
    for (size_t i = 0; i < values.size() && i < other_.size(); ++i) values[i] += other_[i];
  }
  std::vector<double> mine;  // this rank's own sums (loss, correct, samples, scored units)

 private:
  int rank_;
  std::vector<double> other_;
};

}  // namespace

// Issue 15: under data parallel each rank evaluates its shard (every world-th sample, none
// twice) and the sums add up to one process's evaluation of the whole split.
TEST(Trainer, Issue15_ShardedEvaluationAddsUpToTheWholeSplit) {
  const auto data = testing::make_pattern_splits(64, 65);  // an odd split: shards of 33 and 32
  seed_everything(2);
  auto model = make_model("fmnist-cnn", {data.train.sample_shape(), data.train.num_classes});
  TrainOptions o = small_run(1);
  o.eval_batch_size = 16;
  const EvalResult whole =
      Trainer(*model, o, c10::Device("cpu")).evaluate(data.test, data.normalize_mean, data.normalize_std);
  FakeRankSync rank0(0, {0, 0, 0, 0});
  Trainer(*model, o, c10::Device("cpu"), nullptr, &rank0)
      .evaluate(data.test, data.normalize_mean, data.normalize_std);
  ASSERT_EQ(rank0.mine.size(), 4u);
  EXPECT_EQ(rank0.mine[2], 33);
  EXPECT_EQ(rank0.mine[3], 33) << "a classifier scores one unit per sample";
  FakeRankSync rank1(1, rank0.mine);
  const EvalResult both = Trainer(*model, o, c10::Device("cpu"), nullptr, &rank1)
                              .evaluate(data.test, data.normalize_mean, data.normalize_std);
  EXPECT_EQ(rank1.mine[2], 32);
  EXPECT_EQ(both.samples, 65);
  EXPECT_DOUBLE_EQ(both.accuracy, whole.accuracy);
  EXPECT_NEAR(both.loss, whole.loss, 1e-6 * std::max(1.0, whole.loss));
}

}  // namespace saturate
