// SPDX-License-Identifier: Apache-2.0
#pragma once
// The models layer's tensor-parallel seam (models/tensor_parallel.h) over a DistGroup.
//
//   auto tp = make_tensor_parallel_group(*group);
//   model->set_tensor_parallel(tp.get());

#include <memory>

#include "saturate/models/tensor_parallel.h"

namespace saturate {

class DistGroup;

/// `group` must outlive the result. Its ranks are the tensor-parallel ranks, in order.
std::unique_ptr<TensorParallelGroup> make_tensor_parallel_group(DistGroup& group);

}  // namespace saturate
