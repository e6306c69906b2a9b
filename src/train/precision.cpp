// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/precision.h"

#include <torch/torch.h>

#include "compat/torch_compat.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/device/probe.h"

namespace saturate {
namespace {

std::string gpu_label(const CudaDeviceInfo& gpu) {
  return detail::concat("cuda:", gpu.index, " (", gpu.name.empty() ? "unknown GPU" : gpu.name,
                        ", compute capability ", gpu.cc_major, ".", gpu.cc_minor, ")");
}

PrecisionChoice choose(Precision p, std::string reason) {
  PrecisionChoice c;
  c.precision = p;
  c.needs_loss_scaling = p == Precision::kFp16;
  c.reason = std::move(reason);
  return c;
}

PrecisionChoice resolve_cpu(Precision requested, const CpuInfo& cpu) {
  const std::string model = cpu.model.empty() ? "unknown model" : cpu.model;
  switch (requested) {
    case Precision::kFp32:
      return choose(Precision::kFp32, "fp32 (requested) on cpu");
    case Precision::kBf16: {
      PrecisionChoice c = choose(Precision::kBf16,
                    cpu.has_bf16
                        ? "bf16 autocast (requested) on cpu with native bf16"
                        : detail::concat("bf16 autocast (requested) on cpu; no native bf16 "
                                         "on this CPU (",
                                         model,
                                         "), so bf16 is emulated and may be slower "
                                         "than fp32"));
      c.is_emulated = !cpu.has_bf16;
      return c;
    }
    case Precision::kAuto:
      if (cpu.has_bf16) {
        return choose(Precision::kBf16, detail::concat("bf16 autocast (auto): this CPU (", model,
                                                       ") has native bf16 (avx512_bf16/amx)"));
      }
      return choose(Precision::kFp32, detail::concat("fp32 (auto): no native bf16 on this CPU (",
                                                     model, "); bf16 would be emulated"));
    case Precision::kFp16:
    case Precision::kTf32:
      break;
  }
  SATURATE_CHECK(false, "precision: ", to_string(requested),
                 " is not supported on cpu; use bf16 or fp32");
  return {};
}

PrecisionChoice resolve_cuda(Precision requested, const c10::Device& device,
                             const DeviceProbe& probe) {
  const int index = device.has_index() ? device.index() : 0;
  SATURATE_CHECK(index >= 0 && static_cast<size_t>(index) < probe.gpus.size(),
                 "precision: cuda:", index, " is not in the device probe (", probe.gpus.size(),
                 " CUDA devices found", probe.cuda_unavailable_reason.empty() ? "" : "; ",
                 probe.cuda_unavailable_reason, ")");
  const CudaDeviceInfo& gpu = probe.gpus[static_cast<size_t>(index)];
  const std::string label = gpu_label(gpu);
  switch (requested) {
    case Precision::kFp32:
      return choose(Precision::kFp32, detail::concat("fp32 (requested) on ", label));
    case Precision::kTf32:
      SATURATE_CHECK(gpu.has_tf32,
                     "precision: tf32 needs compute capability >= 8.0 (Ampere or "
                     "newer) but ",
                     label, " has no TF32 tensor cores; use fp32 or fp16");
      return choose(Precision::kTf32, detail::concat("tf32 matmuls (requested) on ", label));
    case Precision::kBf16:
      SATURATE_CHECK(gpu.has_bf16,
                     "precision: bf16 needs compute capability >= 8.0 (Ampere or "
                     "newer) but ",
                     label, " has no native bf16; use fp16 or fp32");
      return choose(Precision::kBf16, detail::concat("bf16 autocast (requested) on ", label));
    case Precision::kFp16:
      return choose(Precision::kFp16, detail::concat("fp16 autocast (requested) on ", label,
                                                     " with dynamic loss scaling"));
    case Precision::kAuto:
      break;
  }
  if (gpu.has_bf16) {
    return choose(Precision::kBf16, detail::concat("bf16 autocast (auto): ", label,
                                                   " has native bf16; no loss scaling needed"));
  }
  return choose(Precision::kFp16, detail::concat("fp16 autocast (auto): ", label,
                                                 " has no native bf16; fp16 with dynamic loss "
                                                 "scaling"));
}

std::string matmul_precision_name(at::Float32MatmulPrecision p) {
  switch (p) {
    case at::Float32MatmulPrecision::HIGHEST:
      return "highest";
    case at::Float32MatmulPrecision::HIGH:
      return "high";
    case at::Float32MatmulPrecision::MEDIUM:
      return "medium";
  }
  return "highest";
}

}  // namespace

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "tf32") return Precision::kTf32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  if (name == "auto") return Precision::kAuto;
  SATURATE_CHECK(false, "precision: unknown precision '", name, "'",
                 did_you_mean(name, {"fp32", "tf32", "bf16", "fp16", "auto"}));
  return Precision::kFp32;
}

std::string to_string(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kAuto:
      return "auto";
  }
  return "fp32";
}

PrecisionChoice resolve_precision(Precision requested, const c10::Device& device,
                                  const DeviceProbe& probe) {
  if (device.is_cpu()) return resolve_cpu(requested, probe.cpu);
  if (device.is_cuda()) return resolve_cuda(requested, device, probe);
  if (requested == Precision::kFp32 || requested == Precision::kAuto) {
    return choose(Precision::kFp32,
                  detail::concat("fp32 (", to_string(requested), ") on ", device.str()));
  }
  SATURATE_CHECK(false, "precision: ", to_string(requested), " is not supported on ", device.str(),
                 "; use fp32");
  return {};
}

std::optional<c10::ScalarType> autocast_dtype(Precision p) {
  SATURATE_CHECK(
      p != Precision::kAuto,
      "precision: auto has no autocast dtype; resolve it with resolve_precision() first");
  if (p == Precision::kBf16) return c10::ScalarType::BFloat16;
  if (p == Precision::kFp16) return c10::ScalarType::Half;
  return std::nullopt;
}

AutocastScope::AutocastScope(Precision precision, c10::DeviceType device_type)
    : precision_(precision), device_type_(device_type) {
  SATURATE_CHECK(precision != Precision::kAuto,
                 "precision: cannot enter precision auto; resolve it with resolve_precision() "
                 "first");
  if (precision_ == Precision::kTf32) {
    auto& ctx = at::globalContext();
    // Both getters run before either setter, so a throw (LibTorch refuses to read the legacy
    // flags when they were mixed with its newer per-backend API) leaves nothing to undo.
    prev_matmul_precision_ = matmul_precision_name(ctx.float32MatmulPrecision());
    prev_allow_tf32_cudnn_ = ctx.allowTF32CuDNN();
    ctx.setFloat32MatmulPrecision("high");
    ctx.setAllowTF32CuDNN(true);
    return;
  }
  const std::optional<c10::ScalarType> dtype = autocast_dtype(precision_);
  if (!dtype) return;
  // The order of torch/amp/autocast_mode.py's __enter__.
  prev_cache_enabled_ = at::autocast::is_autocast_cache_enabled();
  prev_autocast_enabled_ = compat::is_autocast_enabled(device_type_);
  prev_autocast_dtype_ = compat::get_autocast_dtype(device_type_);
  compat::set_autocast_enabled(device_type_, true);
  compat::set_autocast_dtype(device_type_, *dtype);
  at::autocast::increment_nesting();
  // Deliberately unlike torch.autocast: its cast cache is keyed by the source tensor alone, so
  // a scope nested in one of another dtype would be handed the enclosing scope's casts (and
  // leave its own behind for it), and a Linear would then mix bf16 and fp16 operands. Such a
  // scope bypasses the cache instead.
  const bool is_nested_with_other_dtype = prev_autocast_enabled_ && prev_autocast_dtype_ != *dtype;
  at::autocast::set_autocast_cache_enabled(prev_cache_enabled_ && !is_nested_with_other_dtype);
}

AutocastScope::~AutocastScope() {
  if (precision_ == Precision::kTf32) {
    auto& ctx = at::globalContext();
    ctx.setFloat32MatmulPrecision(prev_matmul_precision_);
    ctx.setAllowTF32CuDNN(prev_allow_tf32_cudnn_);
    return;
  }
  if (precision_ != Precision::kBf16 && precision_ != Precision::kFp16) return;
  // __exit__: the cache of casted weights is only safe to drop once no autocast region is left.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast_enabled(device_type_, prev_autocast_enabled_);
  compat::set_autocast_dtype(device_type_, prev_autocast_dtype_);
  at::autocast::set_autocast_cache_enabled(prev_cache_enabled_);
}

}  // namespace saturate
