// SPDX-License-Identifier: Apache-2.0
#pragma once
// Training precision: parse the --precision name, resolve it (auto included) against what the
// device offers, and enter it around the forward pass with an RAII scope.
//
//   PrecisionChoice p = resolve_precision(parse_precision("auto"), device, probe);
//   { AutocastScope amp(p.precision, device.type()); loss = loss_fn(model->forward(x), y); }
//   loss.backward();   // outside the scope, as with torch.autocast

#include <optional>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace saturate {

struct DeviceProbe;

/// kFp32: plain float32. kTf32: float32 tensors, TF32 tensor-core matmuls/convolutions (CUDA).
/// kBf16/kFp16: autocast to that dtype with float32 master weights. kAuto: resolve_precision()
/// picks one of the others.
enum class Precision { kFp32, kTf32, kBf16, kFp16, kAuto };

/// "fp32" | "tf32" | "bf16" | "fp16" | "auto"; throws saturate::Error with a suggestion otherwise.
Precision parse_precision(const std::string& name);
std::string to_string(Precision p);

struct PrecisionChoice {
  Precision precision = Precision::kFp32;  ///< never kAuto
  bool needs_loss_scaling = false;         ///< true only for fp16 (use a GradScaler)
  std::string reason;                      ///< one line: what was chosen and why (logs, plan)
  /// The device has no native math for it (bf16 on a CPU without avx512_bf16/amx): it runs,
  /// emulated, usually several times slower than fp32. Commands warn when it was asked for.
  bool is_emulated = false;
};

/// Checks `requested` against `device` and resolves kAuto.
/// - CPU: fp32 and bf16 (emulated, and noted in the reason, without probe.cpu.has_bf16); fp16 and
///   tf32 throw saturate::Error ("precision: fp16 is not supported on cpu; use bf16 or fp32").
///   auto: bf16 with native bf16 (avx512_bf16/amx), else fp32.
/// - CUDA (device index, or 0, looked up in probe.gpus; absent throws): tf32 needs has_tf32 and
///   bf16 needs has_bf16 (saturate::Error naming the GPU and its compute capability otherwise);
///   fp16 always, with needs_loss_scaling. auto: bf16 when has_bf16, else fp16.
/// - Other device types: fp32 only (auto resolves to fp32).
PrecisionChoice resolve_precision(Precision requested, const c10::Device& device,
                                  const DeviceProbe& probe);

/// kBFloat16 for bf16, kHalf for fp16, nullopt for fp32 and tf32. kAuto throws saturate::Error
/// (resolve it first).
std::optional<c10::ScalarType> autocast_dtype(Precision p);

/// Enters `precision` for the lifetime of the scope; wrap the forward pass and the loss, not
/// backward() or the optimizer step.
/// - bf16/fp16: autocast for `device_type` with that dtype, as torch.autocast's
///   __enter__/__exit__ do (the previous enabled flag, dtype and cache flag are restored; the
///   cast cache is cleared when the outermost autocast scope exits). One difference: a scope
///   nested in an autocast region of another dtype on the same device type bypasses the cast
///   cache, which torch.autocast shares between the two dtypes (mixing them). Autocast state
///   is thread-local: the scope affects only the constructing thread.
/// - tf32: float32 matmul precision "high" and cuDNN TF32 on; these are process-wide LibTorch
///   settings, restored on exit, so do not overlap tf32 scopes across threads.
/// - fp32: nothing.
/// kAuto throws saturate::Error. Scopes nest; destroy them in reverse order of construction.
class AutocastScope {
 public:
  AutocastScope(Precision precision, c10::DeviceType device_type);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
  AutocastScope(AutocastScope&&) = delete;
  AutocastScope& operator=(AutocastScope&&) = delete;

 private:
  Precision precision_;
  c10::DeviceType device_type_;
  // autocast (bf16/fp16)
  bool prev_autocast_enabled_ = false;
  c10::ScalarType prev_autocast_dtype_ = c10::ScalarType::Undefined;
  bool prev_cache_enabled_ = true;
  // tf32
  std::string prev_matmul_precision_;  ///< "highest" | "high" | "medium"
  bool prev_allow_tf32_cudnn_ = false;
};

}  // namespace saturate
