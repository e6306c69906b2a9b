// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "saturate/core/error.h"

namespace saturate {
namespace {

const nlohmann::json& state_field(const nlohmann::json& state, const char* key) {
  auto it = state.find(key);
  SATURATE_CHECK(it != state.end(), "grad_scaler: state field '", key, "' is missing");
  return *it;
}

double number_field(const nlohmann::json& state, const char* key) {
  const nlohmann::json& v = state_field(state, key);
  SATURATE_CHECK(v.is_number(), "grad_scaler: state field '", key, "' must be a number, got ",
                 v.dump());
  return v.get<double>();
}

int64_t integer_field(const nlohmann::json& state, const char* key) {
  const nlohmann::json& v = state_field(state, key);
  SATURATE_CHECK(v.is_number_integer(), "grad_scaler: state field '", key,
                 "' must be an integer, got ", v.dump());
  return v.get<int64_t>();
}

// The native kernels take grads of one device and one dtype per call.
struct GradGroup {
  c10::Device device;
  at::ScalarType dtype;
  std::vector<at::Tensor> grads;
};

}  // namespace

void GradScalerOptions::validate() const {
  SATURATE_CHECK(std::isfinite(init_scale) && init_scale > 0,
                 "grad_scaler: init_scale must be a finite number > 0, got ", init_scale);
  SATURATE_CHECK(std::isfinite(growth_factor) && growth_factor > 1,
                 "grad_scaler: growth_factor must be > 1, got ", growth_factor);
  SATURATE_CHECK(backoff_factor > 0 && backoff_factor < 1,
                 "grad_scaler: backoff_factor must be in (0, 1), got ", backoff_factor);
  SATURATE_CHECK(growth_interval_steps >= 1,
                 "grad_scaler: growth_interval_steps must be >= 1, got ", growth_interval_steps);
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options) { options_.validate(); }

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!options_.enabled) return loss;
  if (!scale_.defined()) {
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(loss.device());
    scale_ = at::scalar_tensor(options_.init_scale, opts);
    growth_tracker_ = at::scalar_tensor(init_growth_tracker_, opts.dtype(at::kInt));
  }
  return loss * scale_.to(loss.device(), /*non_blocking=*/true);
}

bool GradScaler::unscale(const std::vector<at::Tensor>& params) {
  if (!options_.enabled) return true;
  SATURATE_ASSERT(stage_ != Stage::kUnscaled,
                  "grad_scaler: unscale() was already called since the last update()");
  SATURATE_ASSERT(stage_ != Stage::kStepped,
                  "grad_scaler: unscale() after step(); call update() first");
  SATURATE_ASSERT(scale_.defined(),
                  "grad_scaler: unscale() before any scale(); the gradients "
                  "were not scaled");
  torch::NoGradGuard no_grad;

  std::vector<GradGroup> groups;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& grad = params[i].grad();
    if (!grad.defined()) continue;
    // As PyTorch: an fp16 gradient means fp16 master weights, whose updates underflow.
    SATURATE_CHECK(grad.scalar_type() != at::kHalf, "grad_scaler: parameter ", i,
                   " has a float16 gradient; keep master parameters and gradients in float32 "
                   "(autocast casts inside the forward pass)");
    const at::Tensor values = grad.is_sparse() ? grad._values() : grad;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const GradGroup& g) {
      return g.device == grad.device() && g.dtype == grad.scalar_type();
    });
    if (it == groups.end()) {
      groups.push_back(GradGroup{grad.device(), grad.scalar_type(), {}});
      it = groups.end() - 1;
    }
    it->grads.push_back(values);
  }

  // Reciprocal in double, as PyTorch, so a power-of-two scale gives an exact inverse.
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  std::vector<c10::Device> devices{scale_.device()};
  std::vector<at::Tensor> found_infs{at::zeros_like(scale_)};
  std::vector<at::Tensor> inv_scales{inv_scale};
  for (GradGroup& group : groups) {
    size_t d = 0;
    while (d < devices.size() && devices[d] != group.device) ++d;
    if (d == devices.size()) {
      devices.push_back(group.device);
      found_infs.push_back(at::zeros_like(scale_, scale_.options().device(group.device)));
      inv_scales.push_back(inv_scale.to(group.device));
    }
    at::_amp_foreach_non_finite_check_and_unscale_(group.grads, found_infs[d], inv_scales[d]);
  }
  found_inf_ = found_infs[0];
  for (size_t d = 1; d < found_infs.size(); ++d) {
    found_inf_ = found_inf_ + found_infs[d].to(scale_.device());
  }
  if (sum_) found_inf_ = sum_(found_inf_).reshape_as(scale_).to(scale_.dtype());
  // The one host read-back of the iteration; step() and update() reuse it.
  has_found_inf_ = found_inf_.item<float>() > 0;
  stage_ = Stage::kUnscaled;
  return !has_found_inf_;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  SATURATE_ASSERT(stage_ != Stage::kStepped,
                  "grad_scaler: step() was already called since the last update()");
  if (stage_ == Stage::kReady) unscale(params);
  const bool should_step = !has_found_inf_;
  if (should_step) optimizer.step();
  stage_ = Stage::kStepped;
  return should_step;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  SATURATE_ASSERT(stage_ != Stage::kReady,
                  "grad_scaler: update() without step() or unscale() in this iteration");
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                         options_.backoff_factor, options_.growth_interval_steps);
  found_inf_ = at::Tensor();
  has_found_inf_ = false;
  stage_ = Stage::kReady;
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : options_.init_scale;
}

int64_t GradScaler::growth_tracker() const {
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : init_growth_tracker_;
}

nlohmann::json GradScaler::state_dict() const {
  if (!options_.enabled) return nlohmann::json::object();
  return {{"scale", get_scale()},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", options_.growth_interval_steps},
          {"growth_tracker", growth_tracker()}};
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  if (!options_.enabled) return;
  SATURATE_CHECK(state.is_object(), "grad_scaler: state must be a JSON object, got ", state.dump());
  SATURATE_CHECK(!state.empty(),
                 "grad_scaler: the state is empty, possibly saved from a disabled scaler");
  GradScalerOptions next = options_;
  next.init_scale = number_field(state, "scale");
  SATURATE_CHECK(std::isfinite(next.init_scale) && next.init_scale > 0,
                 "grad_scaler: state field 'scale' must be a finite number > 0, got ",
                 next.init_scale);
  next.growth_factor = number_field(state, "growth_factor");
  next.backoff_factor = number_field(state, "backoff_factor");
  next.growth_interval_steps = integer_field(state, "growth_interval");
  const int64_t tracker = integer_field(state, "growth_tracker");
  next.validate();
  SATURATE_CHECK(tracker >= 0 && tracker < next.growth_interval_steps,
                 "grad_scaler: state field 'growth_tracker' must be in [0, growth_interval = ",
                 next.growth_interval_steps, "), got ", tracker);
  options_ = next;
  init_growth_tracker_ = tracker;
  if (scale_.defined()) {
    scale_.fill_(options_.init_scale);
    growth_tracker_.fill_(tracker);
  }
}

}  // namespace saturate
