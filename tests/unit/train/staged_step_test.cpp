// SPDX-License-Identifier: Apache-2.0
// The trainer through the pipeline seam (train/staged_step.h): each step and each evaluation
// batch go through the staged step, and the gradient norm that clipping uses is all stages'.
#include "saturate/train/staged_step.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/models/model.h"
#include "saturate/telemetry/phase_timer.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/train/trainer.h"
#include "testing/pattern_dataset.h"
#include "testing/sgd_steps.h"

namespace saturate {
namespace {

// Stage 0 of two: it runs its model whole, and what the other stage holds is `others`, one
// value a sum across stages, in the order the trainer sums (under fp16 its count of non-finite
// gradients, then its squared gradient norm; without, the norm alone); 0 once they run out.
class FirstOfTwoStages final : public StagedStep {
 public:
  FirstOfTwoStages(Model& model, std::vector<double> others)
      : model_(model), others_(std::move(others)) {}
  at::Tensor forward_backward(const at::Tensor& x, const at::Tensor& y, StepRecord&,
                              PhaseTimer* timer, const at::Tensor& loss_scale) override {
    ++steps;
    const at::Tensor loss = mean_loss(model_.forward(x), y);
    (loss_scale.defined() ? loss * loss_scale : loss).backward();
    if (timer != nullptr) timer->mark(Phase::kBackward);
    return loss.detach();
  }
  EvalSums evaluate(const at::Tensor& x, const at::Tensor& y) override {
    ++evaluations;
    return eval_sums(model_.forward(x), y);
  }
  at::Tensor sum_across_stages(const at::Tensor& value) override {
    const double other = static_cast<size_t>(sums) < others_.size() ? others_[sums] : 0.0;
    ++sums;
    return value + other;
  }
  int stage() const override { return 0; }
  int stages() const override { return 2; }
  int steps = 0, evaluations = 0, sums = 0;

 private:
  Model& model_;
  std::vector<double> others_;
};

struct OneStep {
  at::Tensor delta;  // parameters before minus after
  double grad_norm = 0;
  bool skipped = false;
  double loss_scale = 1;  // after the step
  TrainSummary summary;
  int steps = 0, evaluations = 0, sums = 0;  // the staged step's calls
};

// One plain-SGD step at lr 1 (the parameters move by minus the applied gradient), with the
// test split evaluated; through `FirstOfTwoStages(others)` when `staged`.
OneStep one_step(const DatasetSplits& data, double clip, bool staged_step,
                 std::vector<double> others = {}, Precision precision = Precision::kFp32) {
  TrainOptions o = testing::sgd_steps(/*batch_size=*/32, /*steps=*/1, /*lr=*/1.0);
  o.momentum = o.weight_decay = 0.0;
  o.clip_grad_norm = clip;
  o.precision = precision;
  o.evaluate = true;
  seed_everything(5);
  auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
  std::vector<at::Tensor> before;
  for (const auto& p : model->parameters()) before.push_back(p.detach().clone());
  Trainer trainer(*model, o, c10::Device("cpu"));
  std::unique_ptr<FirstOfTwoStages> staged;
  if (staged_step) {
    staged = std::make_unique<FirstOfTwoStages>(*model, std::move(others));
    trainer.set_staged_step(staged.get());
  }
  MemorySink sink;
  OneStep r;
  r.summary = trainer.fit(data, &sink);
  r.grad_norm = sink.records().at(0).grad_norm;
  r.skipped = sink.records().at(0).is_skipped;
  r.loss_scale = sink.records().at(0).loss_scale;
  std::vector<at::Tensor> delta;
  const auto after = model->parameters();
  for (size_t i = 0; i < after.size(); ++i) delta.push_back((before[i] - after[i]).flatten());
  r.delta = torch::cat(delta);
  if (staged) {
    r.steps = staged->steps;
    r.evaluations = staged->evaluations;
    r.sums = staged->sums;
  }
  return r;
}

}  // namespace

TEST(Trainer, Issue19_AStagedStepRunsEveryStepAndEvaluationAndClipsByAllStagesNorm) {
  const auto data = testing::make_pattern_splits(256, 64);
  const OneStep plain = one_step(data, 0.0, false);
  ASSERT_GT(plain.grad_norm, 0.0);
  // With nothing from the other stage, the staged trainer is the plain one, evaluation too.
  const OneStep alone = one_step(data, 0.0, true);
  EXPECT_EQ(alone.steps, 1);
  EXPECT_GE(alone.evaluations, 1);
  EXPECT_EQ(alone.sums, 1);
  EXPECT_NEAR(alone.grad_norm, plain.grad_norm, 1e-5 * plain.grad_norm);
  EXPECT_LE((alone.delta - plain.delta).abs().max().item<double>(), 1e-6);
  EXPECT_NEAR(alone.summary.test_loss, plain.summary.test_loss, 1e-6);
  EXPECT_EQ(alone.summary.test_accuracy, plain.summary.test_accuracy);
  // The other stage's gradients hold 3n² of the squared norm: the global norm is 2n, and a
  // limit of n clips this stage's gradients by half, where its own norm alone (n) would not
  // clip them at all.
  const double n = plain.grad_norm;
  const OneStep clipped = one_step(data, n, true, {3 * n * n});
  EXPECT_NEAR(clipped.grad_norm, 2 * n, 1e-4 * n);
  EXPECT_NEAR(clipped.delta.norm().item<double>(), n / 2, 1e-4 * n);
}

// fp16's loss scaler across stages: a stage whose own gradients are finite still skips the step
// and backs off when another stage found an inf or NaN, so the stages keep one scale and no
// stage steps on a batch another has thrown away.
TEST(Trainer, Issue19_UnderFp16EveryStageSkipsAStepAnotherStageFoundAnInfIn) {
  const auto data = testing::make_pattern_splits(256, 64);
  const OneStep plain = one_step(data, 0.0, false, {}, Precision::kFp16);
  ASSERT_FALSE(plain.skipped);
  ASSERT_GT(plain.delta.abs().max().item<double>(), 0.0);
  // Nothing non-finite elsewhere: the staged step is the plain one, scaled and unscaled alike.
  const OneStep finite = one_step(data, 0.0, true, {0.0, 0.0}, Precision::kFp16);
  EXPECT_FALSE(finite.skipped);
  EXPECT_EQ(finite.loss_scale, plain.loss_scale);
  EXPECT_LE((finite.delta - plain.delta).abs().max().item<double>(), 1e-6);
  EXPECT_NEAR(finite.grad_norm, plain.grad_norm, 1e-5 * plain.grad_norm);
  // The other stage found one: no parameter moves here, and the scale halves as it does there.
  const OneStep other_inf = one_step(data, 0.0, true, {1.0, 0.0}, Precision::kFp16);
  EXPECT_TRUE(other_inf.skipped);
  EXPECT_EQ(other_inf.delta.abs().max().item<double>(), 0.0);
  EXPECT_EQ(other_inf.loss_scale, plain.loss_scale / 2);
}

TEST(Trainer, Issue19_AStagedStepRefusesWhatItCannotDoYet) {
  const auto data = testing::make_pattern_splits(64, 16);
  auto model = make_model("mlp", {data.train.sample_shape(), data.train.num_classes});
  FirstOfTwoStages staged(*model, {});
  for (const auto& [change, name] :
       std::vector<std::pair<std::function<void(TrainOptions&)>, std::string>>{
           {[](TrainOptions& o) { o.accumulate = 2; }, "--accumulate"},
           {[](TrainOptions& o) { o.recompute_segments = 2; }, "--recompute-segments"},
           {[](TrainOptions& o) { o.adaptive_batch = true; }, "--adaptive-batch"}}) {
    TrainOptions o = testing::sgd_steps(16, 1, 0.1);
    change(o);
    Trainer trainer(*model, o, c10::Device("cpu"));
    try {
      trainer.set_staged_step(&staged);
      ADD_FAILURE() << name << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

}  // namespace saturate
