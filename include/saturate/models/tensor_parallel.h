// SPDX-License-Identifier: Apache-2.0
#pragma once
// Tensor parallelism (Megatron-LM's split, issue 19): a layer pair's first Linear split by output
// columns and its second by input rows over T ranks, with one all-reduce each in forward and
// backward. The models layer sees only this seam; dist implements it over a DistGroup.
//
//   auto tp = make_tensor_parallel_group(*group);     // dist
//   model->set_tensor_parallel(tp.get());             // this rank keeps its share of the weights
//
// copy_to_tensor_parallel (Megatron's f) goes before a column-parallel Linear: the identity
// forward, its input gradient summed over the ranks backward. reduce_from_tensor_parallel (g)
// goes after a row-parallel Linear: the partial outputs summed forward, the identity backward.

#include <ATen/core/Tensor.h>

namespace saturate {

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Sums `t` (contiguous) over the group's ranks in place; every rank calls it at the same
  /// point.
  virtual void all_reduce_sum(at::Tensor& t) = 0;
};

/// Megatron's f: x forward; the sum over `group` of the gradient backward. `group` must outlive
/// the backward.
at::Tensor copy_to_tensor_parallel(const at::Tensor& x, TensorParallelGroup& group);
/// Megatron's g: the sum over `group` of x forward; the gradient unchanged backward.
at::Tensor reduce_from_tensor_parallel(const at::Tensor& x, TensorParallelGroup& group);

}  // namespace saturate
