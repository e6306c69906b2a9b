// SPDX-License-Identifier: Apache-2.0
#include "saturate/models/tensor_parallel.h"

#include <torch/torch.h>

namespace saturate {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels in the context as an integer: autograd's saved data holds IValues only.
int64_t as_key(TensorParallelGroup& group) { return reinterpret_cast<int64_t>(&group); }
TensorParallelGroup& from_key(AutogradContext* ctx) {
  return *reinterpret_cast<TensorParallelGroup*>(ctx->saved_data["group"].toInt());
}

at::Tensor summed(const at::Tensor& t, TensorParallelGroup& group) {
  at::Tensor out = t.contiguous().clone();
  group.all_reduce_sum(out);
  return out;
}

struct CopyToParallel : torch::autograd::Function<CopyToParallel> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(grads[0], from_key(ctx)), at::Tensor()};
  }
};

struct ReduceFromParallel : torch::autograd::Function<ReduceFromParallel> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    (void)ctx;
    return summed(x, *reinterpret_cast<TensorParallelGroup*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    (void)ctx;
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

at::Tensor copy_to_tensor_parallel(const at::Tensor& x, TensorParallelGroup& group) {
  return CopyToParallel::apply(x, as_key(group));
}

at::Tensor reduce_from_tensor_parallel(const at::Tensor& x, TensorParallelGroup& group) {
  return ReduceFromParallel::apply(x, as_key(group));
}

}  // namespace saturate
