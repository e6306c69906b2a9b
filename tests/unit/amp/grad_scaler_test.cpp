// SPDX-License-Identifier: Apache-2.0
// GradScaler's state machine on CPU tensors: every transition of the scale and the growth
// tracker, skipped and taken optimizer steps, call-order assertions, state round trip.
#include "saturate/train/grad_scaler.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "saturate/core/error.h"

namespace saturate {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

GradScalerOptions interval(int64_t steps, double init_scale = 1024.0) {
  GradScalerOptions o;
  o.init_scale = init_scale;
  o.growth_interval_steps = steps;
  return o;
}

// One parameter, an SGD optimizer, and an iteration whose (already scaled) gradient is set by
// hand, so each test chooses exactly which values the scaler sees.
struct Fixture {
  at::Tensor w = torch::ones({4}, torch::requires_grad());
  torch::optim::SGD sgd{std::vector<at::Tensor>{w}, torch::optim::SGDOptions(0.1)};

  /// Returns whether the optimizer stepped.
  bool iterate(GradScaler& scaler, double scaled_grad) {
    scaler.scale(torch::ones({}));  // creates the scale tensor on first use
    w.mutable_grad() = torch::full({4}, scaled_grad);
    const bool stepped = scaler.step(sgd, {w});
    scaler.update();
    return stepped;
  }
};

}  // namespace

TEST(GradScaler, ScaleMultipliesLossByCurrentScale) {
  GradScaler scaler(interval(3, 512.0));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 512.0);  // before the first scale()
  const at::Tensor scaled = scaler.scale(torch::tensor(1.5));
  EXPECT_DOUBLE_EQ(scaled.item<double>(), 768.0);
  EXPECT_EQ(scaled.scalar_type(), at::kFloat);
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, UnscaleDividesGradientsByScaleInPlace) {
  GradScaler scaler(interval(3, 8.0));
  at::Tensor a = torch::zeros({3}, torch::requires_grad());
  at::Tensor b = torch::zeros({2}, torch::TensorOptions().dtype(at::kDouble).requires_grad(true));
  at::Tensor no_grad = torch::zeros({2}, torch::requires_grad());
  a.mutable_grad() = torch::tensor({16.0f, -8.0f, 4.0f});
  b.mutable_grad() = torch::tensor({2.0, 80.0}, at::kDouble);  // its own dtype group
  scaler.scale(torch::ones({}));
  EXPECT_TRUE(scaler.unscale({a, b, no_grad}));
  EXPECT_TRUE(torch::equal(a.grad(), torch::tensor({2.0f, -1.0f, 0.5f})));
  EXPECT_TRUE(torch::equal(b.grad(), torch::tensor({0.25, 10.0}, at::kDouble)));
  EXPECT_FALSE(no_grad.grad().defined());  // skipped, not created
}

TEST(GradScaler, GrowsExactlyAfterGrowthIntervalOfFiniteSteps) {
  Fixture f;
  GradScaler scaler(interval(3));
  EXPECT_TRUE(f.iterate(scaler, 1.0));
  EXPECT_EQ(scaler.growth_tracker(), 1);
  EXPECT_TRUE(f.iterate(scaler, 1.0));
  EXPECT_EQ(scaler.growth_tracker(), 2);
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 1024.0);  // not before the interval
  EXPECT_TRUE(f.iterate(scaler, 1.0));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 2048.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  // The next growth needs a full fresh interval.
  f.iterate(scaler, 1.0);
  f.iterate(scaler, 1.0);
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 2048.0);
  f.iterate(scaler, 1.0);
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 4096.0);
}

TEST(GradScaler, BacksOffAndSkipsStepOnInfGradient) {
  Fixture f;
  GradScaler scaler(interval(3));
  f.iterate(scaler, 1.0);  // tracker 1
  const at::Tensor before = f.w.detach().clone();
  EXPECT_FALSE(f.iterate(scaler, kInf));
  EXPECT_TRUE(torch::equal(f.w.detach(), before));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, BacksOffAndSkipsStepOnNanGradient) {
  Fixture f;
  GradScaler scaler(interval(3));
  const at::Tensor before = f.w.detach().clone();
  EXPECT_FALSE(f.iterate(scaler, kNan));
  EXPECT_TRUE(torch::equal(f.w.detach(), before));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, StepsWithUnscaledGradientOnFiniteStep) {
  Fixture f;
  GradScaler scaler(interval(3));
  EXPECT_TRUE(f.iterate(scaler, 1024.0));  // unscaled grad 1.0, lr 0.1
  EXPECT_TRUE(torch::allclose(f.w.detach(), torch::full({4}, 0.9f)));
}

TEST(GradScaler, BacksOffOnEveryConsecutiveNonFiniteStep) {
  Fixture f;
  GradScaler scaler(interval(3));
  f.iterate(scaler, kInf);
  f.iterate(scaler, kNan);
  f.iterate(scaler, -kInf);
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 128.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, NonFiniteStepResetsTrackerSoGrowthNeedsAFreshInterval) {
  Fixture f;
  GradScaler scaler(interval(3));
  f.iterate(scaler, 1.0);
  f.iterate(scaler, 1.0);  // tracker 2: one more finite step would grow
  f.iterate(scaler, kInf);
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 512.0);
  f.iterate(scaler, 1.0);
  f.iterate(scaler, 1.0);  // 4 finite steps in all, but only 2 since the inf
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  f.iterate(scaler, 1.0);
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 1024.0);
}

TEST(GradScaler, KeepsScaleWhenGrownScaleWouldBeInf) {
  Fixture f;
  const double near_max = std::ldexp(1.0, 127);  // 2^128 overflows float32
  GradScaler scaler(interval(1, near_max));
  EXPECT_TRUE(f.iterate(scaler, 1.0));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), near_max);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  f.iterate(scaler, kInf);  // backoff still works from there
  EXPECT_DOUBLE_EQ(scaler.get_scale(), near_max / 2);
}

TEST(GradScaler, DisabledIsIdentityAndAlwaysSteps) {
  Fixture f;
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(o);
  EXPECT_FALSE(scaler.is_enabled());
  const at::Tensor loss = torch::tensor(3.0);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 1.0);
  const at::Tensor before = f.w.detach().clone();
  EXPECT_TRUE(f.iterate(scaler, kInf));  // no inf check: the optimizer steps regardless
  EXPECT_FALSE(torch::equal(f.w.detach(), before));
  f.w.mutable_grad() = torch::full({4}, 2.0);
  EXPECT_TRUE(scaler.unscale({f.w}));
  EXPECT_TRUE(scaler.unscale({f.w}));  // no stage tracking when disabled
  EXPECT_TRUE(torch::equal(f.w.grad(), torch::full({4}, 2.0f)));
  EXPECT_TRUE(scaler.state_dict().empty());
}

TEST(GradScaler, SecondUnscaleBeforeUpdateAsserts) {
  Fixture f;
  GradScaler scaler(interval(3));
  scaler.scale(torch::ones({}));
  f.w.mutable_grad() = torch::ones({4});
  EXPECT_TRUE(scaler.unscale({f.w}));
  EXPECT_THROW(scaler.unscale({f.w}), InternalError);
  // step() after an explicit unscale() does not unscale again.
  EXPECT_TRUE(scaler.step(f.sgd, {f.w}));
  EXPECT_THROW(scaler.unscale({f.w}), InternalError);
  EXPECT_THROW(scaler.step(f.sgd, {f.w}), InternalError);
  scaler.update();
  EXPECT_THROW(scaler.update(), InternalError);  // no step() in this iteration
}

TEST(GradScaler, UnscaleBeforeAnyScaleAsserts) {
  Fixture f;
  GradScaler scaler;
  f.w.mutable_grad() = torch::ones({4});
  EXPECT_THROW(scaler.unscale({f.w}), InternalError);
}

TEST(GradScaler, RejectsFloat16Gradients) {
  GradScaler scaler;
  scaler.scale(torch::ones({}));
  at::Tensor half = torch::zeros({2}, torch::TensorOptions().dtype(at::kHalf).requires_grad(true));
  half.mutable_grad() = torch::ones({2}, at::kHalf);
  try {
    scaler.unscale({half});
    FAIL() << "expected saturate::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float16 gradient"), std::string::npos) << e.what();
  }
}

TEST(GradScaler, StateRoundTripRestoresScaleAndTracker) {
  Fixture f;
  GradScaler scaler(interval(3));
  f.iterate(scaler, kInf);  // 512
  f.iterate(scaler, 1.0);
  f.iterate(scaler, 1.0);  // tracker 2
  const nlohmann::json saved = scaler.state_dict();
  EXPECT_DOUBLE_EQ(saved.at("scale").get<double>(), 512.0);
  EXPECT_EQ(saved.at("growth_tracker").get<int64_t>(), 2);
  EXPECT_EQ(saved.at("growth_interval").get<int64_t>(), 3);
  EXPECT_DOUBLE_EQ(saved.at("growth_factor").get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(saved.at("backoff_factor").get<double>(), 0.5);

  f.iterate(scaler, 1.0);  // change: grows to 1024, tracker 0
  ASSERT_NE(scaler.state_dict(), saved);
  scaler.load_state_dict(saved);  // into existing scale tensors
  EXPECT_EQ(scaler.state_dict(), saved);

  GradScaler fresh;  // defaults differ in every field; no scale tensor yet
  fresh.load_state_dict(saved);
  EXPECT_EQ(fresh.state_dict(), saved);
  EXPECT_TRUE(f.iterate(fresh, 1.0));  // the loaded tracker (2) counts: one step grows
  EXPECT_DOUBLE_EQ(fresh.get_scale(), 1024.0);
}

TEST(GradScaler, LoadStateNamesMissingOrIllTypedField) {
  GradScaler scaler;
  const nlohmann::json good = GradScaler(interval(3)).state_dict();
  auto expect_error = [&](const nlohmann::json& state, const std::string& needle) {
    try {
      scaler.load_state_dict(state);
      ADD_FAILURE() << "expected saturate::Error for " << state.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  nlohmann::json missing = good;
  missing.erase("scale");
  expect_error(missing, "'scale' is missing");
  nlohmann::json ill = good;
  ill["growth_interval"] = "3";
  expect_error(ill, "'growth_interval' must be an integer");
  nlohmann::json bad_scale = good;
  bad_scale["scale"] = -1.0;
  expect_error(bad_scale, "'scale' must be a finite number > 0");
  expect_error(nlohmann::json::object(), "empty");
  // A failed load leaves the scaler unchanged.
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.options().growth_interval_steps, 2000);
}

TEST(GradScalerOptions, ValidateNamesTheInvalidField) {
  auto expect_error = [](GradScalerOptions o, const std::string& field) {
    try {
      o.validate();
      ADD_FAILURE() << "expected saturate::Error naming " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  GradScalerOptions o;
  EXPECT_NO_THROW(o.validate());
  o.init_scale = 0;
  expect_error(o, "init_scale");
  o = {};
  o.init_scale = kInf;
  expect_error(o, "init_scale");
  o = {};
  o.growth_factor = 1.0;
  expect_error(o, "growth_factor");
  o = {};
  o.backoff_factor = 1.0;
  expect_error(o, "backoff_factor");
  o = {};
  o.backoff_factor = 0.0;
  expect_error(o, "backoff_factor");
  o = {};
  o.growth_interval_steps = 0;
  expect_error(o, "growth_interval_steps");
  o = {};
  o.growth_factor = 0.5;
  EXPECT_THROW(GradScaler{o}, Error);  // the constructor validates
}

}  // namespace saturate
