// SPDX-License-Identifier: Apache-2.0
#pragma once
// Dynamic loss scaling for fp16 training, with the semantics of torch.amp.GradScaler on the
// native AMP ops (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_).
//
//   GradScaler scaler;                              // GradScalerOptions defaults: 2^16, x2, x0.5
//   scaler.scale(loss).backward();
//   bool stepped = scaler.step(optimizer, params);  // false: non-finite grads, step skipped
//   scaler.update();

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace saturate {

struct GradScalerOptions {
  double init_scale = 65536.0;  ///< first loss-scale factor (2^16)
  double growth_factor = 2.0;   ///< scale *= this after growth_interval_steps finite steps
  double backoff_factor = 0.5;  ///< scale *= this after a step with inf/NaN gradients
  int64_t growth_interval_steps = 2000;
  bool enabled = true;  ///< false: scale() is the identity and step() always steps

  /// Throws saturate::Error naming the field: init_scale must be finite and > 0,
  /// growth_factor > 1, backoff_factor in (0, 1), growth_interval_steps >= 1.
  void validate() const;
};

/// One scaler per training loop (it keeps one optimizer's per-iteration state). Each iteration:
/// scale(loss).backward(), optionally unscale() (e.g. to clip gradients), step(), update().
/// Not thread-safe. The scale lives on the device of the first scaled loss.
class GradScaler {
 public:
  /// Validates `options` (saturate::Error).
  explicit GradScaler(GradScalerOptions options = {});

  /// `loss` times the current scale (a float32 scalar tensor, created on the loss's device on
  /// first use). Returns `loss` itself when disabled.
  at::Tensor scale(const at::Tensor& loss);

  /// Divides the gradients of `params` (each listed once) by the scale in place, grouped by
  /// device and dtype, and records whether any was inf/NaN. Returns true when all are finite (reads
  /// the flag back, so it waits for the device). Params without a gradient are skipped. Throws
  /// saturate::Error for a float16 gradient (keep master params and grads in fp32);
  /// saturate::InternalError (SATURATE_ASSERT) when called twice before update(), after step(), or
  /// before any scale(). Disabled: does nothing and returns true.
  bool unscale(const std::vector<at::Tensor>& params);

  /// unscale() when not done yet this iteration, then optimizer.step() only when all gradients
  /// were finite. Returns whether it stepped. Syncs the device once per iteration (reading the
  /// inf flag), as PyTorch's does. Disabled: always steps. A second step() before update()
  /// throws saturate::InternalError.
  bool step(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params);

  /// Adjusts the scale after this iteration's step()/unscale() (saturate::InternalError
  /// otherwise): x backoff_factor if any gradient was non-finite (growth tracker reset to 0);
  /// else the tracker counts the finite step and, on reaching growth_interval_steps, the scale
  /// grows by growth_factor (kept when the grown value would be inf) and the tracker resets.
  /// Disabled: does nothing.
  void update();

  /// Current scale on the host (syncs the device): init_scale before the first scale(), 1.0
  /// when disabled.
  double get_scale() const;
  /// Consecutive finite steps since the last growth or backoff.
  int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  /// For a model split over processes (pipeline stages), each holding some of the gradients:
  /// `sum` adds this process's count of non-finite gradients to every other's (a collective each
  /// calls at unscale()), so that all skip the same steps and keep the same scale.
  void set_found_inf_sum(std::function<at::Tensor(const at::Tensor&)> sum) { sum_ = std::move(sum); }
  /// The options in force; load_state_dict() replaces the factors, the interval and init_scale
  /// (with the loaded scale).
  const GradScalerOptions& options() const { return options_; }

  /// {"scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker"}; an empty
  /// object when disabled (as PyTorch's).
  nlohmann::json state_dict() const;
  /// Restores a state_dict(). Throws saturate::Error naming a missing or ill-typed field, an
  /// invalid value, or an empty state (saved from a disabled scaler). Disabled: does nothing.
  void load_state_dict(const nlohmann::json& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };

  GradScalerOptions options_;
  int64_t init_growth_tracker_ = 0;  ///< used when the tracker tensor is created lazily
  at::Tensor scale_;                 ///< float32 scalar; undefined until the first scale()
  at::Tensor growth_tracker_;        ///< int32 scalar on scale_'s device
  Stage stage_ = Stage::kReady;
  at::Tensor found_inf_;        ///< this iteration's inf/NaN count, summed over devices
  bool has_found_inf_ = false;  ///< host copy of found_inf_ > 0
  std::function<at::Tensor(const at::Tensor&)> sum_;  ///< set_found_inf_sum()
};

}  // namespace saturate
