// SPDX-License-Identifier: Apache-2.0
#include "saturate/models/recompute.h"

#include <mutex>
#include <optional>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#if SATURATE_HAS_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include "compat/torch_compat.h"
#include "saturate/core/error.h"

namespace saturate {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct AutocastState {
  bool cpu_enabled = false;
  c10::ScalarType cpu_dtype = c10::kBFloat16;
  bool cuda_enabled = false;
  c10::ScalarType cuda_dtype = c10::kHalf;
};

AutocastState current_autocast_state() {
  AutocastState s;
  s.cpu_enabled = compat::is_autocast_enabled(c10::DeviceType::CPU);
  s.cpu_dtype = compat::get_autocast_dtype(c10::DeviceType::CPU);
  s.cuda_enabled = compat::is_autocast_enabled(c10::DeviceType::CUDA);
  s.cuda_dtype = compat::get_autocast_dtype(c10::DeviceType::CUDA);
  return s;
}

void set_autocast_state(const AutocastState& s) {
  compat::set_autocast_enabled(c10::DeviceType::CPU, s.cpu_enabled);
  compat::set_autocast_dtype(c10::DeviceType::CPU, s.cpu_dtype);
  compat::set_autocast_enabled(c10::DeviceType::CUDA, s.cuda_enabled);
  compat::set_autocast_dtype(c10::DeviceType::CUDA, s.cuda_dtype);
}

// Backward runs on an autograd engine thread (or with the caller's TLS, which need not be the
// forward's), so the forward's autocast state is re-entered explicitly. The cast cache is off
// for the recomputation: each weight is cast once per segment anyway, and cached casts left
// behind after backward would go stale once the optimizer updates the fp32 weights.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& forward_state)
      : saved_(current_autocast_state()), saved_cache_(at::autocast::is_autocast_cache_enabled()) {
    set_autocast_state(forward_state);
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastScope() {
    set_autocast_state(saved_);
    at::autocast::set_autocast_cache_enabled(saved_cache_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState saved_;
  bool saved_cache_;
};

at::Tensor get_rng_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Everything the recomputation needs besides the saved input. ctx->saved_data holds only
// IValues, so this travels as a capsule (see libtorch-compat.md section 5).
struct SegmentState : torch::CustomClassHolder {
  explicit SegmentState(SegmentFn f) : fn(std::move(f)) {}
  SegmentFn fn;
  bool input_requires_grad = false;
  AutocastState autocast;
  at::Tensor cpu_rng;
  at::Tensor cuda_rng;  ///< defined only when the input is on CUDA
  c10::DeviceIndex cuda_device = -1;
};

std::optional<at::Generator> cuda_generator(c10::DeviceIndex device) {
#if SATURATE_HAS_CUDA
  return at::cuda::detail::getDefaultCUDAGenerator(device);
#else
  SATURATE_ASSERT(false, "recompute: CUDA input in a build without CUDA");
  return std::nullopt;
#endif
}

// Puts the forward's generator states in place for the recomputation (so dropout draws the same
// masks) and the current ones back afterwards (so the rest of training sees an unchanged
// stream), like torch.random.fork_rng.
class RngFork {
 public:
  explicit RngFork(const SegmentState& s) : cpu_gen_(at::detail::getDefaultCPUGenerator()) {
    cpu_now_ = get_rng_state(cpu_gen_);
    set_rng_state(cpu_gen_, s.cpu_rng);
    if (s.cuda_rng.defined()) {
      cuda_gen_ = cuda_generator(s.cuda_device);
      cuda_now_ = get_rng_state(*cuda_gen_);
      set_rng_state(*cuda_gen_, s.cuda_rng);
    }
  }
  ~RngFork() {
    set_rng_state(cpu_gen_, cpu_now_);
    if (cuda_gen_) set_rng_state(*cuda_gen_, cuda_now_);
  }
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  at::Generator cpu_gen_;
  at::Tensor cpu_now_;
  std::optional<at::Generator> cuda_gen_;
  at::Tensor cuda_now_;
};

// Arguments: fn (not a variable), input, and an optional dummy; backward returns one gradient
// for each, undefined for fn and the dummy.
struct RecomputeFunction : torch::autograd::Function<RecomputeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const SegmentFn& fn, const at::Tensor& input,
                            const std::optional<at::Tensor>& /*dummy*/) {
    auto state = c10::make_intrusive<SegmentState>(fn);
    state->input_requires_grad = input.requires_grad();
    state->autocast = current_autocast_state();
    state->cpu_rng = get_rng_state(at::detail::getDefaultCPUGenerator());
    if (input.is_cuda()) {
      state->cuda_device = input.device().index();
      state->cuda_rng = get_rng_state(*cuda_generator(state->cuda_device));
    }
    ctx->saved_data["segment"] = c10::IValue::make_capsule(state);
    ctx->save_for_backward({input});
    return fn(input);  // apply() runs this with grad off: no activations are kept
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state =
        c10::static_intrusive_pointer_cast<SegmentState>(ctx->saved_data["segment"].toCapsule());
    at::Tensor x = ctx->get_saved_variables()[0].detach();
    x.requires_grad_(state->input_requires_grad);
    at::Tensor out;
    {
      RngFork rng(*state);
      AutocastScope autocast(state->autocast);
      at::AutoGradMode grad_mode(true);
      out = state->fn(x);
    }
    // Reentrant backward: accumulates into the parameters' .grad and into x.grad, as
    // torch.utils.checkpoint(use_reentrant=True) does. Outside autocast, like Python's.
    if (out.requires_grad()) torch::autograd::backward({out}, {grad_outputs[0]});
    at::Tensor grad_input = state->input_requires_grad ? x.grad() : at::Tensor();
    return {at::Tensor(), grad_input, at::Tensor()};
  }
};

}  // namespace

at::Tensor recompute(const SegmentFn& fn, const at::Tensor& input) {
  SATURATE_CHECK(static_cast<bool>(fn), "recompute: the segment function is empty");
  SATURATE_CHECK(input.defined(), "recompute: the input tensor is undefined");
  if (!at::GradMode::is_enabled()) return fn(input);
  // Without an input that requires grad, apply() would create no node: no recomputation and no
  // parameter grads. The dummy is never read; it only gives the node an edge.
  std::optional<at::Tensor> dummy;
  if (!input.requires_grad())
    dummy = at::empty({0}, input.options().dtype(at::kFloat)).requires_grad_(true);
  return RecomputeFunction::apply(fn, input, dummy);
}

}  // namespace saturate
