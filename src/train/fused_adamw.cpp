// SPDX-License-Identifier: Apache-2.0
#include "train/fused_adamw.h"

#include <ATen/ops/_fused_adamw.h>

namespace saturate::detail {
namespace {

using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

// Whether the fused kernel takes this group: dense floating gradients, every parameter on the
// first one's device and of its dtype.
bool fusable(const torch::optim::OptimizerParamGroup& group) {
  const auto& o = static_cast<const AdamWOptions&>(group.options());
  if (o.amsgrad()) return false;
  const at::Tensor* first = nullptr;
  for (const at::Tensor& p : group.params()) {
    if (!p.grad().defined()) continue;
    if (p.grad().is_sparse() || !at::isFloatingType(p.scalar_type()) ||
        p.grad().scalar_type() != p.scalar_type())
      return false;
    if (first == nullptr) first = &p;
    if (p.device() != first->device() || p.scalar_type() != first->scalar_type()) return false;
  }
  return true;
}

}  // namespace

at::Tensor FusedAdamW::step(LossClosure closure) {
  for (const auto& group : param_groups_)
    if (!fusable(group)) return torch::optim::AdamW::step(closure);
  at::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const AdamWOptions&>(group.options());
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state_[p.unsafeGetTensorImpl()];
      if (!slot) {
        auto s = std::make_unique<AdamWParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(s);
      }
      auto& s = static_cast<AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(s.exp_avg());
      exp_avg_sqs.push_back(s.exp_avg_sq());
      // The kernel reads each parameter's step count (already advanced) from a float scalar.
      steps.push_back(at::scalar_tensor(static_cast<double>(s.step()),
                                        at::TensorOptions().dtype(at::kFloat).device(p.device())));
    }
    if (params.empty()) continue;
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(),
                      std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                      /*amsgrad=*/false, /*maximize=*/false);
  }
  return loss;
}

}  // namespace saturate::detail
