// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/core/log.h"
#include "saturate/core/strings.h"
#include "saturate/data/batch_iterator.h"
#include "saturate/device/cpu_budget.h"
#include "saturate/device/device_memory.h"
#include "saturate/device/preflight.h"
#include "saturate/models/model.h"
#include "saturate/models/tensor_parallel.h"
#include "saturate/telemetry/phase_timer.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/telemetry/throughput.h"
#include "saturate/train/gradient_sync.h"
#include "saturate/train/grad_scaler.h"
#include "saturate/train/lr_schedule.h"
#include "saturate/train/precision.h"
#include "saturate/train/optimizer.h"
#include "saturate/train/staged_step.h"
#include "train/fused_adamw.h"
#include "train/state_snapshot.h"

namespace saturate {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
}

// The line of a LibTorch error that says what went wrong: the first, or for a TorchScript
// interpreter error (a traceback first) the last, without its "RuntimeError: ".
std::string error_gist(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string what = c10_error ? c10_error->what_without_backtrace() : e.what();
  if (what.find("Traceback of TorchScript") == std::string::npos) return first_line(what);
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  std::string last = what.substr(what.rfind('\n') + 1);  // npos + 1 == 0: the whole message
  const std::string prefix = "RuntimeError: ";
  if (last.rfind(prefix, 0) == 0) last = last.substr(prefix.size());
  return last;
}

// Puts 4-D weights in channels-last order (the layout the kernels then keep for activations).
// set_data swaps the storage under the same parameter, so modules and optimizers still hold it.
void to_channels_last(Model& model) {
  torch::NoGradGuard no_grad;
  for (at::Tensor& p : model.parameters()) {
    if (p.dim() != 4) continue;
    p.set_data(at::empty_like(p, at::MemoryFormat::ChannelsLast).copy_(p));
  }
}

GradScalerOptions scaler_options(const TrainOptions& o) {
  GradScalerOptions s = o.scaler;
  // Only fp16 can underflow gradients; bf16 has fp32's exponent range.
  s.enabled = s.enabled && o.precision == Precision::kFp16;
  return s;
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o,
                                                        std::vector<at::Tensor> params) {
  if (o.optimizer == OptimizerKind::kSgd) {
    return std::make_unique<torch::optim::SGD>(
        std::move(params),
        torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  }
  // One fused kernel per step instead of eight passes per parameter (fused_adamw.h).
  return std::make_unique<detail::FusedAdamW>(
      std::move(params), torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
}


struct Trainer::State {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<GradScaler> scaler;
  std::vector<at::Tensor> params;
  // The run's position and history (only the fields capture() fills from here are used):
  // steps done, the next batch's place, the records and parts so far.
  TrainState run;
  bool resume_pending = false;  // restore() ran; the next fit() continues from `run`
  bool in_fit = false;
  Clock::time_point fit_start;  // of the part in progress
  double wall_before_s = 0;     // training-loop time of the parts before it
};

Trainer::Trainer(Model& model, TrainOptions options, c10::Device device, DeviceMemory* memory,
                 GradientSync* sync)
    : model_(model), options_(std::move(options)), device_(device), memory_(memory), sync_(sync),
      state_(new State) {
  options_.validate();
  model_.to(device_);
  if (options_.memory_format == MemoryFormat::kChannelsLast) to_channels_last(model_);
  if (options_.recompute_segments > 0) {
    SATURATE_CHECK(model_.set_recompute_segments(options_.recompute_segments), "train: ",
                   model_.name(), " does not support activation recomputation; drop --recompute-segments");
  }
  if (sync_) {
    sync_->attach(model_);
    // Without accumulation, this rank's own gradient is the noise scale's small batch.
    sync_->measure_local_grad_sqr(options_.noise_scale && options_.accumulate == 1);
  }
  // Built after the move: the optimizer holds the parameters' device tensors.
  state_->params = model_.parameters();
  state_->optimizer = make_optimizer(options_, state_->params);
  state_->scaler = std::make_unique<GradScaler>(scaler_options(options_));
  agree_on_found_inf();
  // A model split by tensor: which parameters are shares, for the gradient norm (found once
  // here, not by name every step).
  if (model_.tensor_parallel_group() != nullptr) {
    const std::vector<at::Tensor> shares = model_.tensor_parallel_shares();
    for (const at::Tensor& p : state_->params)
      tp_share_.push_back(std::any_of(shares.begin(), shares.end(),
                                      [&](const at::Tensor& s) { return s.is_same(p); }));
  }
  timer_ = device_.is_cuda() ? make_cuda_phase_timer(device_.has_index() ? device_.index() : 0)
                             : make_steady_phase_timer();
}

void Trainer::set_phase_timer(std::unique_ptr<PhaseTimer> timer) {
  SATURATE_CHECK(timer != nullptr, "train: set_phase_timer() needs a timer");
  timer_ = std::move(timer);
}

Trainer::~Trainer() = default;

at::Tensor Trainer::layout(const at::Tensor& x) const {
  if (options_.memory_format == MemoryFormat::kContiguous) return x;
  SATURATE_CHECK(x.dim() == 4, "train: --memory-format channels-last needs image batches [N, C, H, W]; ",
                 model_.name(), " gets ", x.dim(), "-D batches ", x.sizes(),
                 " (use --memory-format contiguous)");
  return at::empty_like(x, at::MemoryFormat::ChannelsLast).copy_(x);
}

namespace {

// The squared L2 norm of the gradients in `grads` (0-d double on `device`; 0 for none).
at::Tensor squared_norm(const std::vector<at::Tensor>& grads, const c10::Device& device) {
  return grads.empty() ? torch::zeros({}, torch::TensorOptions().dtype(at::kDouble).device(device))
                       : at::stack(at::_foreach_norm(grads, 2)).to(at::kDouble).square().sum();
}

// The squared norm of the parameters' gradients, `skip`ped ones left out; with a tensor split
// (`tp`), the shares' squares (`is_share`, by parameter) summed over its group and the whole
// parameters' (the same on every rank) counted once.
at::Tensor split_squared_norm(TensorParallelGroup* tp, const std::vector<bool>& is_share,
                              const std::vector<at::Tensor>& params, const c10::Device& device,
                              const std::vector<at::Tensor>& skip = {}) {
  std::vector<at::Tensor> shared, whole;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    if (!p.grad().defined() ||
        std::any_of(skip.begin(), skip.end(), [&](const at::Tensor& e) { return e.is_same(p); }))
      continue;
    (tp != nullptr && is_share[i] ? shared : whole).push_back(p.grad());
  }
  at::Tensor total = squared_norm(whole, device);
  if (tp != nullptr) {
    at::Tensor mine = squared_norm(shared, device).reshape({1}).contiguous();
    tp->all_reduce_sum(mine);
    total = total + mine.reshape({});
  }
  return total;
}

// The global L2 norm of the parameters' gradients as a 0-d float tensor on their device (no
// host sync); with max_norm > 0 the gradients are scaled by min(1, max_norm / (norm + 1e-6)),
// as torch.nn.utils.clip_grad_norm_ does.
// Pipeline parallel (`staged`): the norm of every stage's gradients, summed across the stages,
// so each clips by the same coefficient; a stage without gradients adds 0 on `device`.
// A model split by tensor: the shares' squared norms (`is_share`, by parameter) summed over
// its group, the whole parameters' (the same on every rank) counted once.
at::Tensor grad_norm_and_clip(const std::vector<at::Tensor>& params, double max_norm,
                              StagedStep* staged = nullptr,
                              const c10::Device& device = c10::kCPU,
                              TensorParallelGroup* tp = nullptr,
                              const std::vector<bool>& is_share = {}) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty() && staged == nullptr) return at::Tensor();
  at::Tensor total;
  if (staged != nullptr) {
    // A weight tied across stages counts once: the stage that holds the other copy counts it.
    // Stages split by tensor sum their shares first, so each share's pipeline sums alike.
    const at::Tensor mine =
        split_squared_norm(tp, is_share, params, device, staged->counted_by_another_stage());
    total = staged->sum_across_stages(mine).sqrt().to(at::kFloat);
  } else if (tp != nullptr) {
    total = split_squared_norm(tp, is_share, params, params.front().device()).sqrt().to(at::kFloat);
  } else {
    total = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2)).to(at::kFloat), 2);
  }
  if (max_norm > 0 && !grads.empty()) {
    const at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
    for (at::Tensor& g : grads) g.mul_(coef.to(g.scalar_type()));
  }
  return total;
}

// The elements of a dense tensor as one 1-D view in memory order (a copy only when the tensor
// has gaps or overlaps): a sum of squares does not care about the order.
at::Tensor flat_in_memory_order(const at::Tensor& t) {
  if (t.is_contiguous()) return t.view(-1);
  if (t.is_non_overlapping_and_dense()) return t.as_strided({t.numel()}, {1}, t.storage_offset());
  return t.reshape(-1);
}

// Each tensor's squared L2 norm, as a 1-D tensor on their device. On a CPU one BLAS dot per
// tensor, about a third of what _foreach_norm takes there; elsewhere one fused _foreach_norm.
at::Tensor squared_norms(const std::vector<at::Tensor>& ts) {
  const auto dtype = ts.front().scalar_type();
  if (ts.front().is_cpu() && (dtype == at::kFloat || dtype == at::kDouble)) {
    std::vector<at::Tensor> sq;
    sq.reserve(ts.size());
    for (const at::Tensor& t : ts) {
      const at::Tensor flat = flat_in_memory_order(t);
      sq.push_back(at::dot(flat, flat));
    }
    return at::stack(sq);
  }
  return at::stack(at::_foreach_norm(ts, 2)).square();
}

// The squared L2 norm of each parameter's gradient (times `weights` elementwise, aligned with
// `params`, where given) as a 1-D tensor on their device; undefined when no parameter has a
// gradient.
at::Tensor squared_grad_norms(const std::vector<at::Tensor>& params,
                              const std::vector<at::Tensor>* weights) {
  std::vector<at::Tensor> grads, w;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) continue;
    grads.push_back(params[i].grad());
    if (weights != nullptr) w.push_back((*weights)[i]);
  }
  if (grads.empty()) return at::Tensor();
  return squared_norms(w.empty() ? grads : at::_foreach_mul(grads, w));
}

// Adam's update divides each gradient by sqrt(v / (1 - beta2^t)) + eps, from the optimizer's
// second moments: the preconditioned noise scale measures the gradients the update actually
// follows. The reciprocals of these denominators, computed as AdamW computes them (sqrt(v) /
// sqrt(1 - beta2^t) + eps); empty for SGD, and before AdamW's 5th step (the moments are still
// young: the identity then, as AdaptDL does).
std::vector<at::Tensor> adam_preconditioner(torch::optim::Optimizer& optimizer,
                                            const std::vector<at::Tensor>& params) {
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer) == nullptr) return {};
  const auto& o =
      static_cast<const torch::optim::AdamWOptions&>(optimizer.param_groups().front().options());
  const double beta2 = std::get<1>(o.betas());
  std::vector<at::Tensor> second;
  int64_t step = 0;
  for (const at::Tensor& p : params) {
    auto it = optimizer.state().find(p.unsafeGetTensorImpl());
    if (it == optimizer.state().end()) return {};
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    second.push_back(s.exp_avg_sq());
    step = s.step();
  }
  if (step < 5) return {};
  std::vector<at::Tensor> w = at::_foreach_sqrt(second);
  at::_foreach_mul_(w, 1.0 / std::sqrt(1.0 - std::pow(beta2, step)));
  at::_foreach_add_(w, o.eps());
  at::_foreach_reciprocal_(w);
  return w;
}

// The sum of a tensor's elements, read on the host (0 for an undefined one): the step's noise
// norms, added up when its record is read rather than by more small ops in the step.
double host_sum(const at::Tensor& t) {
  if (!t.defined()) return 0;
  at::Tensor h = t.is_cpu() ? t : t.to(at::kCPU);
  if (h.scalar_type() != at::kFloat && h.scalar_type() != at::kDouble) h = h.to(at::kDouble);
  h = h.contiguous();
  double sum = 0;
  if (h.scalar_type() == at::kFloat) {
    const float* v = h.data_ptr<float>();
    for (int64_t i = 0; i < h.numel(); ++i) sum += v[i];
  } else {
    const double* v = h.data_ptr<double>();
    for (int64_t i = 0; i < h.numel(); ++i) sum += v[i];
  }
  return sum;
}

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Adds the host time of a scope to `us` (what measuring the noise scale spent).
class SpentUs {
 public:
  explicit SpentUs(double& us) : us_(us), start_(steady_now_ns()) {}
  ~SpentUs() { us_ += static_cast<double>(steady_now_ns() - start_) / 1e3; }
  SpentUs(const SpentUs&) = delete;
  SpentUs& operator=(const SpentUs&) = delete;

 private:
  double& us_;
  int64_t start_;
};

}  // namespace

at::Tensor mean_loss(const at::Tensor& logits, const at::Tensor& y) {
  if (logits.dim() == 3)
    return torch::nn::functional::cross_entropy(
        logits.flatten(0, 1).to(at::kFloat), y.flatten(),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnoreTarget));
  return torch::nn::functional::cross_entropy(logits.to(at::kFloat), y);
}

EvalSums eval_sums(const at::Tensor& logits_in, const at::Tensor& y) {
  const at::Tensor logits = logits_in.to(at::kFloat);
  const bool seq = logits.dim() == 3;
  const at::Tensor flat_logits = seq ? logits.flatten(0, 1) : logits;
  const at::Tensor flat_y = seq ? y.flatten() : y;
  const at::Tensor valid = flat_y.ne(kIgnoreTarget);
  EvalSums s;
  s.loss_sum = torch::nn::functional::cross_entropy(
                   flat_logits, flat_y,
                   torch::nn::functional::CrossEntropyFuncOptions()
                       .reduction(torch::kSum)
                       .ignore_index(kIgnoreTarget))
                   .item<double>();
  s.correct = flat_logits.argmax(1).eq(flat_y).logical_and(valid).sum().item<int64_t>();
  s.units = valid.sum().item<int64_t>();
  s.per_token = seq;
  return s;
}

void Trainer::stand_in_for_step(int64_t begin, int64_t batch, int64_t micro) {
  for (int64_t b = begin; b < batch; b += micro) {
    const bool last = std::min(batch, b + micro) == batch;
    if (b != begin) sync_->before_forward(last);  // buffers broadcast, as on the other ranks
    if (!last) continue;                          // their backward there is local
    sync_->before_backward(true);
    // Every parameter's gradient hook fires, so every bucket's all-reduce runs (with zeros).
    at::Tensor zero = torch::zeros({}, state_->params.front().options());
    for (const at::Tensor& p : state_->params) zero = zero + p.sum() * 0;
    zero.backward();
    // The collective the other ranks make after their backward (noise-scale norms).
    if (options_.noise_scale) (void)sync_->take_local_grad_sqr();
  }
}

const char* staged_step_conflict(const TrainOptions& o) {
  if (o.accumulate > 1)
    return "--accumulate above 1 (a pipeline's micro-batches are --micro-batches)";
  if (o.recompute_segments > 0) return "--recompute-segments";
  if (o.adaptive_batch) return "--adaptive-batch";
  return nullptr;
}

void Trainer::set_staged_step(StagedStep* staged) {
  const char* what = sync_ != nullptr ? "data parallel" : staged_step_conflict(options_);
  SATURATE_CHECK(staged == nullptr || what == nullptr, "--pipeline-stages: cannot be combined with ",
                 what, " yet");
  staged_ = staged;
  agree_on_found_inf();
}

void Trainer::agree_on_found_inf() {
  // fp16: a stage or a tensor share that finds an inf or NaN makes every one skip the step and
  // back off. A share's inf need not reach the others (an overflow in its own weights' gradient
  // stays there), and a share that stepped alone would change the whole tensors (embeddings,
  // LayerNorms) that every share must hold alike.
  TensorParallelGroup* tp = model_.tensor_parallel_group();
  StagedStep* staged = staged_;
  std::function<at::Tensor(const at::Tensor&)> sum;
  if (tp != nullptr || staged != nullptr)
    sum = [tp, staged](const at::Tensor& n) {
      at::Tensor total = n;
      if (tp != nullptr) {
        total = n.reshape({1}).contiguous().clone();
        tp->all_reduce_sum(total);
      }
      return staged != nullptr ? staged->sum_across_stages(total) : total;
    };
  state_->scaler->set_found_inf_sum(std::move(sum));
}

at::Tensor Trainer::staged_train_step(const at::Tensor& x, const at::Tensor& y, StepRecord& r,
                                      PhaseTimer* timer) {
  auto& optimizer = *state_->optimizer;
  auto& scaler = *state_->scaler;
  optimizer.zero_grad(/*set_to_none=*/true);
  // fp16: the last stage's backward starts from the loss times the scale, which every stage's
  // scaler holds alike (they take the same decisions).
  const at::Tensor scale =
      scaler.is_enabled()
          ? scaler.scale(torch::ones({}, torch::TensorOptions().dtype(at::kFloat).device(device_)))
          : at::Tensor();
  at::Tensor loss;
  {
    AutocastScope autocast(options_.precision, device_.type());
    loss = staged_->forward_backward(x, y, r, timer, scale);
  }
  if (scaler.is_enabled()) scaler.unscale(state_->params);  // summed across the stages
  last_grad_norm_ = grad_norm_and_clip(state_->params, options_.clip_grad_norm, staged_, device_,
                                       model_.tensor_parallel_group(), tp_share_);
  if (scaler.is_enabled()) {
    r.is_skipped = !scaler.step(optimizer, state_->params);
    scaler.update();
    r.loss_scale = scaler.get_scale();
  } else {
    optimizer.step();
  }
  last_noise_ = NoiseNorms();
  if (timer) timer->mark(Phase::kOptimizer);
  return loss;
}

at::Tensor Trainer::train_step(const at::Tensor& batch_x, const at::Tensor& y, StepRecord& r,
                               PhaseTimer* timer) {
  if (staged_ != nullptr) return staged_train_step(layout(batch_x), y, r, timer);
  const at::Tensor x = layout(batch_x);
  auto& optimizer = *state_->optimizer;
  auto& scaler = *state_->scaler;
  const int64_t batch = x.size(0);
  const int64_t accumulate = step_accumulate_ > 0 ? step_accumulate_ : options_.accumulate;
  const int64_t micro = (batch + accumulate - 1) / accumulate;
  const int world = sync_ ? sync_->world_size() : 1;
  NoiseProbe noise = begin_noise_probe(batch, micro, world);
  optimizer.zero_grad(/*set_to_none=*/true);
  at::Tensor loss_sum = torch::zeros({}, x.options().dtype(at::kFloat));
  for (int64_t begin = 0; begin < batch; begin += micro) {
    const int64_t end = std::min(batch, begin + micro);
    const bool last = end == batch;  // only the last micro-batch synchronises gradients
    if (sync_) sync_->before_forward(last);
    at::Tensor loss;
    try {
      AutocastScope autocast(options_.precision, device_.type());
      at::Tensor logits = model_.forward(x.slice(0, begin, end));
      // The loss in fp32 whatever the forward ran in; weighted by the micro-batch's share so
      // the accumulated gradient is the mean over the whole batch.
      loss = mean_loss(logits, y.slice(0, begin, end)) *
             (static_cast<double>(end - begin) / static_cast<double>(batch));
    } catch (const c10::OutOfMemoryError&) {
      if (options_.agree_on_oom && sync_ && sync_->world_size() > 1)
        stand_in_for_step(begin, batch, micro);
      throw;
    }
    if (timer) timer->mark(Phase::kForward);
    if (sync_) sync_->before_backward(last);
    scaler.scale(loss).backward();
    // Host-timed: on a CPU device the wait is part of the backward just marked.
    if (sync_ && last && !device_.is_cuda()) r.communication_ms += sync_->take_wait_ms();
    if (noise.on && begin == 0 && !last) measure_first_micro_batch(noise, batch, end);
    loss_sum += loss.detach();
    if (timer) timer->mark(Phase::kBackward);
  }
  // The gradients' global norm (unscaled first under fp16), kept on the device until the
  // record is read; clipping scales them down to --clip-grad-norm.
  if (scaler.is_enabled()) scaler.unscale(state_->params);
  if (noise.on) measure_whole_step(noise, batch, micro, world);
  last_grad_norm_ = grad_norm_and_clip(state_->params, options_.clip_grad_norm, nullptr, device_,
                                       model_.tensor_parallel_group(), tp_share_);
  double scale_used = 1.0;
  if (scaler.is_enabled()) {
    // The scaler reads its found-inf flag on the host: loss scaling waits for the device here,
    // as torch.amp does.
    r.is_skipped = !scaler.step(optimizer, state_->params);
    scale_used = scaler.get_scale();
    scaler.update();
    r.loss_scale = scaler.get_scale();
  } else {
    optimizer.step();
  }
  last_noise_ = finish_noise_probe(noise, last_grad_norm_, scale_used);
  if (timer) timer->mark(Phase::kOptimizer);
  return loss_sum;
}

// Whether the step measures the noise scale, and under AdamW, on every few measured steps, the
// preconditioner its norms are taken with.
Trainer::NoiseProbe Trainer::begin_noise_probe(int64_t batch, int64_t micro, int world) {
  NoiseProbe noise;
  noise.on = options_.noise_scale && (micro < batch || world > 1) && noise_due(world);
  // The preconditioned norms cost two passes over the gradients: every few measured steps only
  // (the estimate averages steps, so fewer of them still leave it unbiased).
  if (noise.on && noise_steps_++ % kPrecondEvery == 0 &&
      options_.optimizer == OptimizerKind::kAdamW) {
    SpentUs spent(noise.spent_us);
    if (precond_.empty() || precond_uses_++ % kPrecondReuse == 0) {
      precond_ = adam_preconditioner(*state_->optimizer, state_->params);
      precond_uses_ = precond_.empty() ? 0 : 1;  // AdamW's moments are still too young
    }
    noise.precond = precond_.empty() ? nullptr : &precond_;
    noise.norms.precond_identity = precond_.empty();
  }
  return noise;
}

// Whether this step measures the noise scale within TrainOptions::noise_scale_budget: the time
// since the last step earns its share as credit (at most one step's worth is banked, so a pause
// such as an evaluation does not buy a run of measured steps), and measuring spends it.
bool Trainer::noise_due(int world) {
  const int64_t now = steady_now_ns();
  const double budget = options_.noise_scale_budget;
  if (last_step_start_ns_) {
    const double step_us = static_cast<double>(now - *last_step_start_ns_) / 1e3;
    noise_steps_us_ += step_us;
    noise_credit_us_ = std::min(noise_credit_us_ + budget * step_us, budget * step_us);
  }
  last_step_start_ns_ = now;
  // Data parallel without accumulation: the small batch is the ranks' all-reduced local norms,
  // a collective every rank makes at every step.
  const bool collective = world > 1 && options_.accumulate == 1;
  const bool forced = noise_forced_;
  noise_forced_ = false;
  return budget >= 1 || collective || forced || noise_credit_us_ >= 0;
}

// The first micro-batch's mean gradient is the accumulated one times batch / its size.
void Trainer::measure_first_micro_batch(NoiseProbe& noise, int64_t batch, int64_t end) {
  SpentUs spent(noise.spent_us);
  const double f = static_cast<double>(batch) / static_cast<double>(end);
  noise.norms.small = squared_grad_norms(state_->params, nullptr);
  noise.norms.small_scale = f * f;
  if (noise.precond != nullptr)
    noise.norms.small_precond = squared_grad_norms(state_->params, noise.precond);
  noise.norms.b_small = static_cast<double>(end);
}

// After unscaling and before clipping: the whole step's (all ranks') gradient, and under data
// parallel without accumulation, this rank's own one as the small batch.
void Trainer::measure_whole_step(NoiseProbe& noise, int64_t batch, int64_t micro, int world) {
  SpentUs spent(noise.spent_us);
  at::Tensor local = sync_ ? sync_->take_local_grad_sqr() : at::Tensor();
  NoiseNorms& n = noise.norms;
  n.b_big = static_cast<double>(batch) * world;
  if (!n.small.defined() && world > 1 && micro == batch && local.defined()) {
    n.small = local;
    n.b_small = static_cast<double>(batch);
  }
  if (noise.precond != nullptr && n.small_precond.defined())
    n.big_precond = squared_grad_norms(state_->params, noise.precond);
}

// The step's norms for its record; what measuring took is spent from the budget.
Trainer::NoiseNorms Trainer::finish_noise_probe(NoiseProbe& noise, const at::Tensor& grad_norm,
                                                double scale_used) {
  noise_credit_us_ -= noise.spent_us;
  noise_spent_us_ += noise.spent_us;
  if (!noise.on || !noise.norms.small.defined() || !grad_norm.defined()) return NoiseNorms();
  ++noise_measured_;
  // The small batch's norms were taken on scaled gradients (fp16; 1 otherwise).
  noise.norms.small_scale /= scale_used * scale_used;
  noise.norms.big_norm = grad_norm;
  return std::move(noise.norms);
}

TrainSummary Trainer::fit(const DatasetSplits& data, TelemetrySink* sink,
                          const std::atomic<bool>* stop) {
  const TensorDataset& train = data.train;
  SATURATE_CHECK(train.size() > 0, "train: the training split of ", data.description,
                 " is empty");
  BatchIteratorOptions it_opts;
  it_opts.batch_size = options_.batch_size;
  it_opts.shuffle = true;
  it_opts.seed = options_.seed;
  it_opts.normalize_mean = data.normalize_mean;
  it_opts.normalize_std = data.normalize_std;
  BatchIterator batches(train, it_opts);
  return fit(batches, data, sink, stop);
}

// One fit(): the loop over steps and everything it tracks between them. Reading a record only
// once the timer says it is ready keeps the host from waiting for the device at every step;
// more than a few steps in flight, and the oldest is read anyway (the device queue would block
// the host soon).
class Trainer::FitLoop {
 public:
  FitLoop(Trainer& trainer, BatchSource& batches, const DatasetSplits& data, TelemetrySink* sink,
          const std::atomic<bool>* stop);
  TrainSummary run();

 private:
  // Steps whose times (and loss) the device has not delivered yet.
  struct InFlight {
    StepRecord record;
    at::Tensor loss;
    at::Tensor grad_norm;  // undefined when no gradient was made
    int64_t ticket;
    double comm_ms;  // the part of the backward phase that waited for communication
    NoiseNorms noise;  // Trainer::last_noise_ of the step
  };
  static constexpr size_t kMaxInFlight = 3;
  // Under data parallel the ranks agree this often on stopping, checkpoints and divergence.
  static constexpr int64_t kAgreeEvery = 8;

  void begin();
  bool continue_at_boundary(int64_t step);
  void take_step(int64_t step);
  Batch next_batch(StepRecord& r);
  // --adaptive-batch: the data source's batches consumed so far (the run's length and LR
  // schedule count these), the step's batches joined, its micro-batches, and the decision.
  int64_t consumed() const {
    return run_.epoch * batches_.batches_per_epoch() + run_.batch_in_epoch;
  }
  Batch next_step_batch(StepRecord& r);
  int64_t step_accumulate(int64_t step, int64_t samples) const;
  void adapt(int64_t step);
  // Without a plan's curve: this rank's samples/s at the current batch since it began, and
  // whether twice its peak memory fits the limit; the tried batch kept or undone.
  double measured_samples_per_s(int64_t step) const;
  bool doubled_fits(int64_t step) const;
  void settle_trial(int64_t step, int64_t current, const NoiseScaleEstimate& n);
  void apply_change(const BatchChange& c, int64_t per_step);
  bool more_steps() const { return adaptive_ ? consumed() < total_ : run_.step < total_; }
  at::Tensor train_step_or_oom(const at::Tensor& x, const at::Tensor& y, StepRecord& r,
                               int64_t step, std::string& oom);
  void agree_oom(int64_t step, const std::string& oom);
  void complete_front();
  void drain() {
    while (!in_flight_.empty()) complete_front();
  }
  void watch(const StepRecord& rec);
  void read_noise(InFlight& f);
  void add_noise(const StepRecord& rec);
  void diverge(int64_t step, const std::string& reason, double loss_scale, double lr);
  void checkpoint(int64_t steps_done);
  void evaluate_periodically(int64_t step);
  void finish(int64_t step);
  void summarize_records();
  void evaluate_at_end();

  Trainer& t_;
  State& st_;
  TrainState& run_;
  BatchSource& batches_;
  const DatasetSplits& data_;
  TelemetrySink* sink_;
  const std::atomic<bool>* stop_;
  PhaseTimer& timer_;
  int64_t total_ = 0;
  int64_t warmup_ = 0;
  int64_t first_ = 0;
  bool resumed_ = false;
  TrainSummary summary_;
  std::deque<InFlight> in_flight_;
  // Divergence watch: the last finite loss, the recent gradient norms, fp16 skips in a row.
  int64_t last_finite_step_ = -1;
  double last_finite_loss_ = std::numeric_limits<double>::quiet_NaN();
  std::deque<double> recent_norms_;
  int64_t skipped_in_a_row_ = 0;
  bool scaling_ = false;
  // The gradient noise scale: raw, and with Adam's preconditioner.
  NoiseScale noise_, noise_precond_;
  // --target: the periodic evaluation's interval and the training losses a "loss" target reads.
  int64_t eval_every_ = 0;
  std::deque<double> target_losses_;
  bool target_hit_ = false;
  void reach_target(int64_t steps_done, double seen);
  // Periodic evaluation: the held-out split when there is one. Its time is not a step's.
  bool has_val_ = false;
  const TensorDataset* periodic_ = nullptr;
  std::string prefix_;
  Clock::time_point run_start_;
  double start_offset_ms_ = 0;
  // Under data parallel the ranks stop (and checkpoint) at the same step: one that stopped
  // alone would leave the others waiting in their next all-reduce. Every few steps they agree
  // on whether any was told to stop, wants a checkpoint or saw the run diverge; the signal
  // reaches them at slightly different steps.
  bool agree_ = false;
  bool agree_at_boundary_ = false;  // agree_, or a split model's processes (Trainer::vote_)
  bool writer_ = true;
  bool adaptive_ = false;
  AdaptiveBatchRule rule_;
  int64_t max_micro_ = 0;  // the largest step run whole: the plan's largest measured batch
  // No plan's curve: the run measures its own (rule_.curve), from the step its batch began.
  bool measure_ = false;
  int64_t batch_since_ = 0;
  bool trying_ = false;
  double lr_before_trial_ = 1;
  double trial_phi_ = 0;  // the φ credited when the trial began
};

// --adaptive-batch decides this often, and measures the noise scale on every this-many-th step
// that has no second gradient of its own (splitting it in two micro-batches).
constexpr int64_t kAdaptEvery = 50;
constexpr int64_t kAdaptProbeEvery = 4;

Trainer::FitLoop::FitLoop(Trainer& trainer, BatchSource& batches, const DatasetSplits& data,
                          TelemetrySink* sink, const std::atomic<bool>* stop)
    : t_(trainer), st_(*trainer.state_), run_(trainer.state_->run), batches_(batches),
      data_(data), sink_(sink), stop_(stop), timer_(*trainer.timer_) {
  SATURATE_CHECK(batches.batches_per_epoch() > 0, "train: the batch source yields no batches");
  total_ = t_.options_.total_steps(batches.batches_per_epoch());
  warmup_ = t_.options_.resolved_warmup_steps(total_);
  resumed_ = st_.resume_pending;
  st_.resume_pending = false;
  if (!resumed_) run_ = TrainState();
  first_ = run_.step;
  SATURATE_CHECK(first_ <= total_, "train: the checkpoint is at step ", first_,
                 ", past this run's ", total_, " steps");
  scaling_ = st_.scaler->is_enabled();
  has_val_ = data.validation.size() > 0;
  periodic_ = has_val_ ? &data.validation : &data.test;
  prefix_ = has_val_ ? "val_" : "test_";
  agree_ = t_.sync_ && t_.sync_->world_size() > 1;
  agree_at_boundary_ = agree_ || static_cast<bool>(t_.vote_);
  writer_ = !t_.sync_ || t_.sync_->rank() == 0;
  const TrainOptions& o = t_.options_;
  adaptive_ = o.adaptive_batch;
  if (adaptive_) {
    rule_.b0 = o.batch_size;
    rule_.world = t_.sync_ ? t_.sync_->world_size() : 1;
    rule_.curve = o.adaptive_curve;
    rule_.optimizer = o.optimizer;
    measure_ = o.adaptive_curve.empty();
    batch_since_ = first_;
    // The user's own split into micro-batches stands (a memory limit the plan did not see);
    // without one, a step runs whole up to the largest batch the plan measured (any batch,
    // when the run measures its own: a tried batch must run whole to be measured).
    max_micro_ = (o.batch_size + o.accumulate - 1) / o.accumulate;
    if (o.accumulate == 1) {
      for (const auto& point : o.adaptive_curve) max_micro_ = std::max(max_micro_, point.first);
      if (measure_) max_micro_ = std::numeric_limits<int64_t>::max() / 4;
    }
  }
}

// Where the run starts: at step 0, or where restore() left it.
void Trainer::FitLoop::begin() {
  run_.segment_starts.push_back(static_cast<int64_t>(run_.records.size()));
  run_.records.reserve(static_cast<size_t>(total_));
  if (sink_) sink_->on_begin(total_);
  // The noise scale's budget counts this run's steps only.
  t_.last_step_start_ns_.reset();
  t_.noise_credit_us_ = t_.noise_spent_us_ = t_.noise_steps_us_ = 0;
  t_.noise_measured_ = 0;
  t_.precond_.clear();
  // A validation target needs evaluations to be seen: every 2% of the run unless asked.
  const TrainOptions& o = t_.options_;
  eval_every_ = o.eval_every;
  if (eval_every_ == 0 && o.target_metric.rfind("val_", 0) == 0)
    eval_every_ = std::max<int64_t>(1, total_ / 50);
  t_.model_.train(true);
  if (resumed_) {
    batches_.seek(run_.epoch, run_.batch_in_epoch);
  } else {
    batches_.start_epoch(0);
  }
  if (resumed_) summary_.resumed_from_step = first_;
  for (const StepRecord& r : run_.records) add_noise(r);  // a resumed run's estimate goes on
  for (auto it = run_.records.rbegin(); it != run_.records.rend(); ++it) {
    if (std::isfinite(it->loss)) {
      last_finite_step_ = it->step;
      last_finite_loss_ = it->loss;
      break;
    }
  }
  run_start_ = Clock::now();
  st_.in_fit = true;
  st_.fit_start = run_start_;
  st_.wall_before_s = run_.train_wall_s;
  start_offset_ms_ = run_.train_wall_s * 1000.0;
}

TrainSummary Trainer::FitLoop::run() {
  begin();
  int64_t step = first_;
  while (continue_at_boundary(step)) {
    take_step(step);
    ++step;
  }
  finish(step);
  return summary_;
}

// The boundary after `step` steps: stop as diverged, as told, or at the end; checkpoint when
// due. False: the loop ends here.
bool Trainer::FitLoop::continue_at_boundary(int64_t step) {
  CheckpointHook* hook = t_.hook_;
  bool stopping = stop_ && stop_->load();
  bool due = hook && step > first_ && step < total_ && hook->is_due(step);
  bool diverged = summary_.divergence.has_value();
  bool reached = target_hit_;
  if (agree_at_boundary_) {
    if (step % kAgreeEvery == 0) {
      std::vector<double> votes = {stopping ? 1.0 : 0.0, due ? 1.0 : 0.0, diverged ? 1.0 : 0.0,
                                   target_hit_ ? 1.0 : 0.0};
      if (t_.vote_) t_.vote_(votes);
      else t_.sync_->sum_across_ranks(votes);
      stopping = votes[0] > 0;
      due = votes[1] > 0;
      diverged = votes[2] > 0;
      reached = votes[3] > 0;  // any rank's (a validation target is alike on every rank)
    } else {
      stopping = due = diverged = reached = false;
    }
  }
  if (reached && !diverged) return false;  // the target is the run's end
  if (diverged) {
    if (!summary_.divergence) {
      // This rank's own records stayed finite: its defaults for scale and LR, as before.
      diverge(step - 1, "another rank's run diverged", Divergence().loss_scale, Divergence().lr);
    }
    return false;
  }
  if (hook && (due || (stopping && step > first_))) checkpoint(step);
  if (stopping) {
    summary_.is_interrupted = true;
    return false;
  }
  return adaptive_ ? consumed() < total_ : step < total_;
}

// The next batch, starting the next epoch when this one is done.
Batch Trainer::FitLoop::next_batch(StepRecord& r) {
  std::optional<Batch> batch = batches_.next();
  if (!batch) {
    batches_.start_epoch(++run_.epoch);
    run_.batch_in_epoch = 0;
    batch = batches_.next();
    SATURATE_ASSERT(batch.has_value(), "an epoch with no batches");
  }
  ++run_.batch_in_epoch;
  r.epoch = run_.epoch;
  r.samples = batch->size;
  return std::move(*batch);
}

void Trainer::FitLoop::take_step(int64_t step) {
  StepRecord r;
  r.step = step;
  if (t_.memory_) t_.memory_->reset_peak();
  r.start_ms = start_offset_ms_ + ms_between(run_start_, Clock::now());
  const int64_t faults_before = minor_page_faults();
  if (adaptive_ && step > first_ && step % kAdaptEvery == 0) adapt(step);
  // The schedule's position: steps, or under --adaptive-batch the source's batches so far.
  const int64_t position = adaptive_ ? consumed() : step;
  timer_.begin();
  const Batch batch = adaptive_ ? next_step_batch(r) : next_batch(r);
  timer_.mark(Phase::kDataWait);
  at::Tensor x = batch.inputs, y = batch.targets;
  // Token windows [B, T]: the step's tokens, for tokens/s.
  if (x.dim() == 2 && x.scalar_type() == at::kLong) r.tokens = x.numel();
  if (t_.device_.is_cuda() && !x.is_cuda()) {
    // Pinned staging lets the copy run asynchronously with respect to the host (a Loader with
    // cuda_device set has already copied the batch on its side stream).
    x = x.pin_memory().to(t_.device_, /*non_blocking=*/true);
    y = y.pin_memory().to(t_.device_, /*non_blocking=*/true);
  }
  if (step == first_) check_same_device(st_.params, {x, y}, t_.device_);
  timer_.mark(Phase::kHostToDevice);
  r.lr = lr_at(position, total_, t_.options_.lr, warmup_, t_.options_.schedule) *
         run_.adaptive_lr_multiplier;
  set_lr(*st_.optimizer, r.lr);
  if (adaptive_) {
    t_.step_accumulate_ = step_accumulate(step, batch.size);
    // A step split in two only to measure the noise scale is measured whatever the budget.
    t_.noise_forced_ = t_.step_accumulate_ > (batch.size + max_micro_ - 1) / max_micro_;
  }
  const bool agree_on_oom = t_.options_.agree_on_oom && agree_;
  std::string oom;  // this rank's out-of-memory message, when agree_on_oom
  at::Tensor loss = train_step_or_oom(x, y, r, step, oom);
  if (agree_on_oom && !oom.empty()) agree_oom(step, oom);
  const int64_t ticket = timer_.finish();
  if (agree_on_oom) agree_oom(step, oom);
  const int64_t faults_after = minor_page_faults();
  if (faults_before >= 0 && faults_after >= 0) r.page_faults = faults_after - faults_before;
  // Allocations happen at enqueue time, so the peak is known now even on CUDA.
  if (t_.memory_) r.peak_memory_bytes = t_.memory_->snapshot().peak_memory_bytes;
  in_flight_.push_back(
      InFlight{r, std::move(loss), t_.last_grad_norm_, ticket, r.communication_ms, t_.last_noise_});
  run_.step = step + 1;
  while (!in_flight_.empty() &&
         (in_flight_.size() > kMaxInFlight || timer_.ready(in_flight_.front().ticket))) {
    complete_front();
  }
  evaluate_periodically(step);
}

// The step's batch under --adaptive-batch: adaptive_per_step of the source's batches (fewer at
// the run's end), joined.
Batch Trainer::FitLoop::next_step_batch(StepRecord& r) {
  Batch first = next_batch(r);
  const int64_t more = std::min(run_.adaptive_per_step - 1, total_ - consumed());
  if (more <= 0) return first;
  std::vector<at::Tensor> inputs = {first.inputs}, targets = {first.targets};
  int64_t size = first.size;
  for (int64_t i = 0; i < more; ++i) {
    Batch b = next_batch(r);
    inputs.push_back(b.inputs);
    targets.push_back(b.targets);
    size += b.size;
  }
  r.samples = size;
  return Batch{torch::cat(inputs), torch::cat(targets), size};
}

// Micro-batches of an adaptive step of `samples`: whole up to the largest batch the plan
// measured, in pieces of it beyond; a step with no second gradient (one micro-batch, one rank)
// runs as two every kAdaptProbeEvery steps, so the noise scale keeps being measured.
int64_t Trainer::FitLoop::step_accumulate(int64_t step, int64_t samples) const {
  const int64_t pieces = (samples + max_micro_ - 1) / max_micro_;
  if (pieces == 1 && rule_.world == 1 && samples > 1 && step % kAdaptProbeEvery == 0) return 2;
  return pieces;
}

// Whether to double the batch before `step`: every rank reads the same records (all-reduced
// norms) but the estimate is averaged across ranks anyway, so they decide alike. Without a
// plan's curve the ranks also average their measured samples/s and agree on the memory room.
void Trainer::FitLoop::adapt(int64_t step) {
  drain();
  NoiseScaleEstimate n = noise_.estimate();
  const NoiseScaleEstimate pre = noise_precond_.estimate();
  if (rule_.optimizer == OptimizerKind::kAdamW && pre.is_resolved()) n = pre;
  const int64_t current = run_.adaptive_per_step * t_.options_.batch_size;
  double x = measure_ ? measured_samples_per_s(step) : 0;
  bool fits = measure_ && doubled_fits(step);
  if (agree_) {
    std::vector<double> v = {n.low, static_cast<double>(n.steps), x, fits ? 1.0 : 0.0};
    t_.sync_->sum_across_ranks(v);
    n.low = v[0] / rule_.world;
    n.steps = static_cast<int64_t>(v[1] / rule_.world);
    x = v[2] / rule_.world;
    fits = v[3] >= rule_.world - 0.5;
  }
  // After the collective: every rank makes it, a diverged one too (it stops at the boundary).
  if (summary_.divergence) return;
  if (measure_ && x > 0) {
    auto& curve = rule_.curve;
    auto at = std::find_if(curve.begin(), curve.end(), [&](const auto& p) { return p.first == current; });
    if (at != curve.end()) at->second = x;
    else curve.emplace_back(current, x);
    std::sort(curve.begin(), curve.end());
  }
  if (measure_ && trying_) {
    settle_trial(step, current, n);
    return;
  }
  std::optional<BatchChange> c = next_batch_change(rule_, current, n, step);
  if (!c && measure_ && fits) c = next_batch_trial(rule_, current, n, step);
  if (!c) return;
  if (c->kind == "try") {
    trying_ = true;
    lr_before_trial_ = run_.adaptive_lr_multiplier;
    trial_phi_ = c->phi;
  }
  apply_change(*c, run_.adaptive_per_step * 2);
}

void Trainer::FitLoop::apply_change(const BatchChange& c, int64_t per_step) {
  run_.adaptive_per_step = per_step;
  run_.adaptive_lr_multiplier = c.lr_multiplier;
  batch_since_ = c.step;
  summary_.batch_changes.push_back(c);
  SATURATE_LOG_INFO("train: step ", c.step, ": batch ", c.from, " → ", c.to,
                    c.kind == "try" ? " (tried)" : c.kind == "undo" ? " (undone)" : "", ": ", c.why);
  if (sink_) sink_->on_batch_change(c.step, c.to, c.lr_multiplier, c.why);
}

// The tried batch has run since the trial began and is measured: kept when growing to it from
// half of it is now predicted to pay on the measured curve, undone otherwise. The trial tests
// the samples/s, so it is judged at the φ that started it unless the estimate now credits more
// (its lower end moves between decisions as the interval breathes).
void Trainer::FitLoop::settle_trial(int64_t step, int64_t current, const NoiseScaleEstimate& n) {
  trying_ = false;
  NoiseScaleEstimate judged = n;
  if (!(judged.low >= trial_phi_)) judged.low = trial_phi_;
  judged.steps = std::max(judged.steps, kNoiseMinSteps);
  const int64_t before = current / 2;
  if (const auto keep = next_batch_change(rule_, before, judged, step)) {
    SATURATE_LOG_INFO("train: step ", step, ": batch ", current, " kept: ", keep->why);
    return;
  }
  apply_change(undo_batch_trial(rule_, current, judged, step, lr_before_trial_),
               run_.adaptive_per_step / 2);
}

// The median samples/s of this rank's steps at the current batch, past the first few after it
// began (allocations settle); 0 with fewer than 10 such steps.
double Trainer::FitLoop::measured_samples_per_s(int64_t step) const {
  constexpr int64_t kSettle = 5, kLast = 200;
  std::vector<double> xs;
  for (auto it = run_.records.rbegin(); it != run_.records.rend() && xs.size() < kLast; ++it) {
    if (it->step < batch_since_ + kSettle) break;
    if (it->step < step && it->step_ms > 0) xs.push_back(it->samples / (it->step_ms / 1000.0));
  }
  if (xs.size() < 10) return 0;
  std::nth_element(xs.begin(), xs.begin() + xs.size() / 2, xs.end());
  return xs[xs.size() / 2];
}

// Twice the current batch's peak memory (weights and optimizer state, which do not double,
// included: an over-estimate) within the device's limit; true when no limit is known.
bool Trainer::FitLoop::doubled_fits(int64_t step) const {
  const int64_t limit = t_.memory_ ? t_.memory_->limit_bytes() : 0;
  if (limit <= 0) return true;
  int64_t peak = 0;
  for (auto it = run_.records.rbegin(); it != run_.records.rend(); ++it) {
    if (it->step < batch_since_) break;
    if (it->step < step) peak = std::max(peak, it->peak_memory_bytes);
  }
  return peak > 0 && 2 * peak <= limit;
}

// Trainer::train_step, with its out-of-memory kept in `oom` when the ranks agree on it, and a
// model that cannot run in the chosen memory format named as such.
at::Tensor Trainer::FitLoop::train_step_or_oom(const at::Tensor& x, const at::Tensor& y,
                                               StepRecord& r, int64_t step, std::string& oom) {
  const TrainOptions& o = t_.options_;
  try {
    return t_.train_step(x, y, r, &timer_);
  } catch (const Error&) {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    if (!(o.agree_on_oom && agree_)) throw;
    oom = first_line(e.what_without_backtrace());
  } catch (const std::exception& e) {
    // A model written for NCHW (a view() of a conv output) fails in the other layout: say
    // which setting to change rather than only what LibTorch saw.
    if (step > first_ || o.memory_format == MemoryFormat::kContiguous) throw;
    SATURATE_CHECK(false, "train: ", t_.model_.name(), " cannot run in --memory-format ",
                   to_string(o.memory_format), " (", error_gist(e),
                   "); use --memory-format contiguous");
  }
  return at::Tensor();
}

// Data parallel trials: did any rank run out of memory in this step? Asked outside the timed
// step (its all-reduce is not the step's), by a rank that did straight away.
void Trainer::FitLoop::agree_oom(int64_t step, const std::string& oom) {
  std::vector<double> votes = {oom.empty() ? 0.0 : 1.0};
  t_.sync_->sum_across_ranks(votes);
  if (votes[0] == 0) return;
  TORCH_CHECK_WITH(OutOfMemoryError, false,
                   oom.empty() ? "another rank ran out of memory in step " + std::to_string(step) +
                                     " (data parallel: one rank's out-of-memory is every rank's)"
                               : oom);
}

void Trainer::FitLoop::complete_front() {
  InFlight& f = in_flight_.front();
  timer_.read(f.ticket, f.record);
  const double comm = std::min(f.comm_ms, f.record.backward_ms);
  f.record.backward_ms -= comm;
  f.record.communication_ms += comm;
  f.record.loss = f.loss.item<double>();
  if (f.grad_norm.defined()) f.record.grad_norm = f.grad_norm.item<double>();
  if (f.noise.small.defined()) {
    double us = 0;
    {
      SpentUs spent(us);
      read_noise(f);
    }
    t_.noise_credit_us_ -= us;
    t_.noise_spent_us_ += us;
  }
  std::vector<StepRecord>& records = run_.records;
  records.push_back(f.record);
  in_flight_.pop_front();
  if (sink_) sink_->on_step(records.back());
  watch(records.back());
}

// The step's noise-scale norms: its unbiased |G|² and tr(Σ), and φ smoothed so far; every few
// steps under AdamW the preconditioned ones too (before its 5th step the raw ones stand in).
void Trainer::FitLoop::read_noise(InFlight& f) {
  const NoiseNorms& n = f.noise;
  // small, big, small preconditioned, big preconditioned
  std::array<double, 4> sqr = {n.small_scale * host_sum(n.small), 0,
                               n.small_scale * host_sum(n.small_precond),
                               host_sum(n.big_precond)};
  sqr[1] = host_sum(n.big_norm);
  sqr[1] *= sqr[1];
  StepRecord& r = f.record;
  if (auto s = noise_sample({sqr[0], sqr[1], n.b_small, n.b_big})) {
    r.noise_grad_sqr = s->grad_sqr;
    r.noise_trace = s->trace;
  }
  const bool precond = n.big_precond.defined() || n.precond_identity;
  const size_t p = n.big_precond.defined() ? 2 : 0;
  if (precond) {
    if (auto s = noise_sample({sqr[p], sqr[p + 1], n.b_small, n.b_big})) {
      r.noise_grad_sqr_precond = s->grad_sqr;
      r.noise_trace_precond = s->trace;
    }
  }
  r.gns_b_small = n.b_small;
  r.gns_b_big = n.b_big;
  add_noise(r);
  r.gns = noise_.smoothed();
  r.gns_precond = noise_precond_.smoothed();
}

void Trainer::FitLoop::add_noise(const StepRecord& r) { add_step_noise(r, noise_, noise_precond_); }

// The diagnosis of a run that diverged at `step`, with what the watch saw up to it.
void Trainer::FitLoop::diverge(int64_t step, const std::string& reason, double loss_scale,
                               double lr) {
  Divergence d;
  d.step = step;
  d.reason = reason;
  d.last_finite_step = last_finite_step_;
  d.last_finite_loss = last_finite_loss_;
  d.loss_scale = loss_scale;
  d.lr = lr;
  d.grad_norms.assign(recent_norms_.begin(), recent_norms_.end());
  summary_.divergence = d;
}

void Trainer::FitLoop::watch(const StepRecord& rec) {
  recent_norms_.push_back(rec.grad_norm);
  if (recent_norms_.size() > 10) recent_norms_.pop_front();
  skipped_in_a_row_ = rec.is_skipped ? skipped_in_a_row_ + 1 : 0;
  const int64_t max_skipped = t_.options_.max_skipped_steps;
  std::string reason;
  if (scaling_) {
    // fp16: an overflow skips the step and lowers the scale; only a run of them is fatal.
    if (skipped_in_a_row_ >= max_skipped) {
      reason = std::to_string(skipped_in_a_row_) +
               " fp16 steps in a row skipped for non-finite gradients (--max-skipped-steps " +
               std::to_string(max_skipped) + ")";
    }
  } else if (!std::isfinite(rec.loss)) {
    reason = std::string("the loss is ") + (std::isnan(rec.loss) ? "nan" : "inf");
  } else if (rec.grad_norm >= 0 && !std::isfinite(rec.grad_norm)) {
    reason = "the gradient norm is inf";
  } else if (std::isnan(rec.grad_norm)) {
    reason = "the gradient norm is nan";
  }
  if (std::isfinite(rec.loss) && !rec.is_skipped) {
    last_finite_step_ = rec.step;
    last_finite_loss_ = rec.loss;
  }
  if (t_.options_.target_metric == "loss" && !target_hit_) {
    target_losses_.push_back(rec.loss);
    if (static_cast<int64_t>(target_losses_.size()) > kTargetLossSteps) target_losses_.pop_front();
    double sum = 0;
    for (double l : target_losses_) sum += l;
    const double mean = sum / static_cast<double>(target_losses_.size());
    if (static_cast<int64_t>(target_losses_.size()) == kTargetLossSteps &&
        mean <= t_.options_.target_value)
      reach_target(rec.step + 1, mean);
  }
  if (reason.empty() || summary_.divergence) return;
  diverge(rec.step, reason, rec.loss_scale, rec.lr);
}

// A checkpoint at the boundary after `steps_done` steps: the steps in flight are read first,
// and a state that diverged or holds a non-finite parameter is never written.
void Trainer::FitLoop::checkpoint(int64_t steps_done) {
  drain();
  if (summary_.divergence) return;
  {
    torch::NoGradGuard no_grad;
    for (const at::Tensor& p : st_.params) {
      if (!torch::isfinite(p).all().item<bool>()) return;
    }
  }
  if (sink_) sink_->on_checkpoint(steps_done);
  if (writer_) summary_.last_checkpoint = t_.hook_->save(t_.capture());
  t_.hook_->saved(steps_done);
}

void Trainer::FitLoop::evaluate_periodically(int64_t step) {
  const TrainOptions& o = t_.options_;
  if (!(o.evaluate && eval_every_ > 0 && (step + 1) % eval_every_ == 0 && more_steps() &&
        periodic_->size() > 0 && !summary_.divergence))
    return;
  drain();
  const EvalResult ev = t_.evaluate(*periodic_, data_.normalize_mean, data_.normalize_std);
  if (sink_) {
    sink_->on_eval(step + 1, prefix_ + "accuracy", ev.accuracy);
    sink_->on_eval(step + 1, prefix_ + "loss", ev.loss);
    if (ev.per_token) sink_->on_eval(step + 1, prefix_ + "perplexity", std::exp(ev.loss));
  }
  if (target_hit_) return;
  if (o.target_metric == "val_accuracy" && ev.accuracy >= o.target_value)
    reach_target(step + 1, ev.accuracy);
  if (o.target_metric == "val_loss" && ev.loss <= o.target_value) reach_target(step + 1, ev.loss);
}

// The target is reached after `steps_done` steps: what it took, from the records so far.
void Trainer::FitLoop::reach_target(int64_t steps_done, double seen) {
  target_hit_ = true;
  summary_.target_reached = true;
  summary_.target_steps = steps_done;
  summary_.target_seen = seen;
  double ms = 0;
  int64_t samples = 0;
  for (const StepRecord& r : run_.records) {
    if (r.step >= steps_done) break;
    ms += r.step_ms;
    samples += r.samples;
  }
  summary_.target_samples = samples;
  summary_.target_train_s = ms / 1000.0;
}

// After the last step (`step` steps done): the records read, a final checkpoint, the summary
// and the evaluation at the end.
void Trainer::FitLoop::finish(int64_t step) {
  drain();
  // The completed run's state is worth keeping too: a resume of it has nothing left to do, and
  // a longer run can continue from it.
  if (t_.hook_ && !summary_.is_interrupted && !summary_.divergence && step > first_)
    checkpoint(step);
  st_.in_fit = false;
  run_.train_wall_s =
      st_.wall_before_s + std::chrono::duration<double>(Clock::now() - run_start_).count();
  summary_.train_wall_s = run_.train_wall_s;
  summarize_records();
  evaluate_at_end();
  if (sink_) sink_->on_end();
}

void Trainer::FitLoop::summarize_records() {
  const std::vector<StepRecord>& records = run_.records;
  const int64_t warmup_steps = t_.options_.timing_warmup_steps;
  summary_.steps = static_cast<int64_t>(records.size());
  for (const auto& r : records) {
    summary_.samples += r.samples;
    summary_.peak_memory_bytes = std::max(summary_.peak_memory_bytes, r.peak_memory_bytes);
    summary_.skipped_steps += r.is_skipped ? 1 : 0;
  }
  summary_.loss_scale = st_.scaler->is_enabled() ? st_.scaler->get_scale() : 1.0;
  summary_.noise = noise_.estimate();
  summary_.noise_precond = noise_precond_.estimate();
  summary_.noise_measured_steps = t_.noise_measured_;
  summary_.noise_cost_share =
      t_.noise_steps_us_ > 0 ? t_.noise_spent_us_ / t_.noise_steps_us_ : 0.0;
  // Epochs in the source's batches: a streamed or held-out-reduced split is not `data.train`.
  summary_.epochs = static_cast<double>(adaptive_ ? consumed() : records.size()) /
                    static_cast<double>(batches_.batches_per_epoch());
  if (run_.segment_starts.size() <= 1) {
    summary_.samples_per_s = steady_samples_per_s(records, warmup_steps);
    summary_.phases = mean_phases(records, static_cast<size_t>(warmup_steps));
  } else {
    // A resumed run: each part warmed up again (a fresh process, cold caches), so each part's
    // first steps are left out.
    std::vector<StepRecord> steady;
    const std::vector<int64_t>& starts = run_.segment_starts;
    for (size_t i = 0; i < starts.size(); ++i) {
      const size_t begin = static_cast<size_t>(starts[i]);
      const size_t end =
          i + 1 < starts.size() ? static_cast<size_t>(starts[i + 1]) : records.size();
      const size_t from = begin + static_cast<size_t>(std::max<int64_t>(0, warmup_steps));
      for (size_t k = from; k < end && k < records.size(); ++k) steady.push_back(records[k]);
    }
    if (steady.empty()) steady = records;
    summary_.samples_per_s = steady_samples_per_s(steady, 0);
    summary_.phases = mean_phases(steady, 0);
  }
  const size_t tail = std::min<size_t>(50, records.size());
  double tail_loss = 0.0;
  for (size_t i = records.size() - tail; i < records.size(); ++i) tail_loss += records[i].loss;
  summary_.final_loss = tail ? tail_loss / static_cast<double>(tail) : 0.0;
  summary_.final_loss_steps = static_cast<int64_t>(tail);
}

void Trainer::FitLoop::evaluate_at_end() {
  if (!t_.options_.evaluate || summary_.is_interrupted || summary_.divergence) return;
  auto report = [&](const TensorDataset& split, const std::string& name, double& accuracy,
                    double& loss) {
    const EvalResult ev = t_.evaluate(split, data_.normalize_mean, data_.normalize_std);
    accuracy = ev.accuracy;
    loss = ev.loss;
    if (sink_) {
      sink_->on_eval(summary_.steps, name + "_accuracy", ev.accuracy);
      sink_->on_eval(summary_.steps, name + "_loss", ev.loss);
      if (ev.per_token) sink_->on_eval(summary_.steps, name + "_perplexity", std::exp(ev.loss));
    }
  };
  if (has_val_) report(data_.validation, "val", summary_.val_accuracy, summary_.val_loss);
  if (data_.test.size() > 0)
    report(data_.test, "test", summary_.test_accuracy, summary_.test_loss);
}

TrainSummary Trainer::fit(BatchSource& batches, const DatasetSplits& data, TelemetrySink* sink,
                          const std::atomic<bool>* stop) {
  return FitLoop(*this, batches, data, sink, stop).run();
}

TrainState Trainer::capture() const {
  const State& st = *state_;
  TrainState s;
  s.step = st.run.step;
  s.epoch = st.run.epoch;
  s.batch_in_epoch = st.run.batch_in_epoch;
  s.records = st.run.records;
  s.segment_starts = st.run.segment_starts;
  s.train_wall_s =
      st.in_fit ? st.wall_before_s + std::chrono::duration<double>(Clock::now() - st.fit_start).count()
                : st.run.train_wall_s;
  {
    torch::NoGradGuard no_grad;
    for (const at::Tensor& t : model_.state_tensors())
      s.model.push_back(t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous());
  }
  torch::serialize::OutputArchive archive;
  st.optimizer->save(archive);
  std::ostringstream out;
  archive.save_to(out);
  s.optimizer = out.str();
  s.scaler = st.scaler->state_dict();
  {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu.mutex());
    s.cpu_generator = cpu.get_state();
  }
  for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i) {
    at::Generator gpu = at::globalContext().defaultGenerator(
        c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
    std::lock_guard<std::mutex> lock(gpu.mutex());
    s.cuda_generators.push_back(gpu.get_state());
  }
  return s;
}

void Trainer::restore(const TrainState& s) {
  std::vector<at::Tensor> tensors = model_.state_tensors();
  const std::vector<std::string> mine = tensor_fingerprint(tensors);
  const std::vector<std::string> theirs = tensor_fingerprint(s.model);
  SATURATE_CHECK(mine.size() == theirs.size(), "train: the checkpoint holds ", theirs.size(),
                 " tensors, ", model_.name(), " has ", mine.size(), " (a different model)");
  for (size_t i = 0; i < mine.size(); ++i) {
    SATURATE_CHECK(mine[i] == theirs[i], "train: the checkpoint's tensor ", i, " is ", theirs[i],
                   ", ", model_.name(), "'s is ", mine[i], " (a different model)");
  }
  SATURATE_CHECK(s.step >= 0 && static_cast<int64_t>(s.records.size()) == s.step,
                 "train: the checkpoint has ", s.records.size(), " step records for step ", s.step);
  state_->optimizer->zero_grad(/*set_to_none=*/true);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(s.model[i]);
  }
  state_->optimizer->state().clear();
  if (!s.optimizer.empty()) {
    std::istringstream in(s.optimizer);
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    state_->optimizer->load(archive);
  }
  if (!s.scaler.is_null()) state_->scaler->load_state_dict(s.scaler);
  if (s.cpu_generator.defined()) {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu.mutex());
    cpu.set_state(s.cpu_generator);
  }
  const auto gpus = std::min<int64_t>(static_cast<int64_t>(torch::cuda::device_count()),
                                      static_cast<int64_t>(s.cuda_generators.size()));
  for (int64_t i = 0; i < gpus; ++i) {
    at::Generator gpu = at::globalContext().defaultGenerator(
        c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
    std::lock_guard<std::mutex> lock(gpu.mutex());
    gpu.set_state(s.cuda_generators[static_cast<size_t>(i)]);
  }
  TrainState& run = state_->run;
  run.step = s.step;
  run.epoch = s.epoch;
  run.batch_in_epoch = s.batch_in_epoch;
  run.records = s.records;
  run.segment_starts = s.segment_starts;
  run.train_wall_s = s.train_wall_s;
  state_->resume_pending = true;
}

ProbeResult Trainer::probe(int64_t batch_size, const DatasetSplits& data) {
  SATURATE_CHECK(memory_ != nullptr, "train: probe() needs the trainer to have a DeviceMemory");
  SATURATE_CHECK(staged_ == nullptr, "train: probe() runs one process's model, not a pipeline's");
  SATURATE_CHECK(batch_size > 0, "train: probe batch size must be positive, got ", batch_size);
  SATURATE_CHECK(data.train.size() > 0, "train: cannot probe with an empty training split");
  const bool was_training = model_.is_training();
  model_.train(true);
  const detail::StateSnapshot saved(model_, *state_->optimizer);
  const nlohmann::json scaler_state = state_->scaler->state_dict();
  const ProbeResult result = probe_once(
      [&] {
        // The batch is part of what must fit: batch_size samples (wrapping around small
        // datasets), made inside the probe.
        const at::Tensor idx =
            torch::arange(batch_size, torch::kLong).remainder(data.train.size());
        const at::Tensor x = data.train.inputs.index_select(0, idx).to(at::kFloat).div_(255.0)
                                 .sub_(data.normalize_mean).div_(data.normalize_std).to(device_);
        const at::Tensor y = data.train.targets.index_select(0, idx).to(device_);
        StepRecord r;
        (void)train_step(x, y, r, /*timer=*/nullptr).item<double>();  // waits for the device
      },
      *memory_);
  // Out of the catch block and out of the batch's scope: put everything back, then let the
  // allocator hand its cache back.
  saved.restore(model_, *state_->optimizer);
  state_->scaler->load_state_dict(scaler_state);
  model_.train(was_training);
  memory_->release_cached();
  return result;
}

EvalResult Trainer::evaluate(const TensorDataset& data, double normalize_mean,
                             double normalize_std) {
  const bool was_training = model_.is_training();
  model_.train(false);
  if (sync_) sync_->before_evaluate();
  // Data parallel: each rank evaluates every world-th sample (no padding, so no sample counts
  // twice) and the sums are added up across ranks.
  const int world = sync_ ? sync_->world_size() : 1;
  TensorDataset shard = data;
  if (world > 1 && data.size() > 0) {
    const at::Tensor idx = torch::arange(sync_->rank(), data.size(), world, torch::kLong);
    shard.inputs = data.inputs.index_select(0, idx);
    shard.targets = data.targets.index_select(0, idx);
  }
  EvalSums total;  // units: samples, or target tokens for text
  int64_t samples = 0;
  {
    // Inference mode: no autograd records and no version counters, less memory than no_grad.
    c10::InferenceMode inference;
    BatchIteratorOptions it_opts;
    it_opts.batch_size = options_.eval_batch_size;
    it_opts.shuffle = false;
    it_opts.normalize_mean = normalize_mean;
    it_opts.normalize_std = normalize_std;
    BatchIterator batches(shard, it_opts);
    batches.start_epoch(0);
    while (shard.size() > 0) {
      auto batch = batches.next();
      if (!batch) break;
      at::Tensor x = layout(batch->inputs.to(device_));
      at::Tensor y = batch->targets.to(device_);
      if (staged_ != nullptr) {  // through every stage; the sums come from the last
        AutocastScope autocast(options_.precision, device_.type());
        total += staged_->evaluate(x, y);
        samples += batch->size;
        continue;
      }
      at::Tensor logits;
      {
        AutocastScope autocast(options_.precision, device_.type());
        logits = model_.forward(x).to(at::kFloat);
      }
      // Language models: every target token counts, padding (-1) does not.
      total += eval_sums(logits, y);
      samples += batch->size;
    }
  }
  if (world > 1) {
    std::vector<double> sums = {total.loss_sum, static_cast<double>(total.correct),
                                static_cast<double>(samples), static_cast<double>(total.units)};
    sync_->sum_across_ranks(sums);
    total.loss_sum = sums[0];
    total.correct = static_cast<int64_t>(std::llround(sums[1]));
    samples = static_cast<int64_t>(std::llround(sums[2]));
    total.units = static_cast<int64_t>(std::llround(sums[3]));
  }
  model_.train(was_training);
  EvalResult result;
  result.samples = samples;
  result.per_token = total.per_token;
  if (total.units > 0) {
    result.accuracy = static_cast<double>(total.correct) / static_cast<double>(total.units);
    result.loss = total.loss_sum / static_cast<double>(total.units);
  }
  return result;
}

double steady_samples_per_s(const std::vector<StepRecord>& records, int64_t warmup_steps) {
  return steady_throughput(records, warmup_steps, /*window_steps=*/0).mean_samples_per_s;
}

void check_target_metric(const std::string& metric) {
  const std::vector<std::string> names = {"val_accuracy", "val_loss", "loss"};
  SATURATE_CHECK(std::find(names.begin(), names.end(), metric) != names.end(),
                 "train: --target: unknown metric '", metric, "'", did_you_mean(metric, names));
}

}  // namespace saturate
