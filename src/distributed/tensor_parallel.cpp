// SPDX-License-Identifier: Apache-2.0
#include "saturate/distributed/tensor_parallel.h"

#include <vector>

#include "saturate/distributed/process_group.h"

namespace saturate {
namespace {

class DistTensorParallel final : public TensorParallelGroup {
 public:
  explicit DistTensorParallel(DistGroup& group) : group_(group) {}
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.world_size(); }
  void all_reduce_sum(at::Tensor& t) override {
    std::vector<at::Tensor> v = {t};
    group_.allreduce_sum(v);
  }

 private:
  DistGroup& group_;
};

}  // namespace

std::unique_ptr<TensorParallelGroup> make_tensor_parallel_group(DistGroup& group) {
  return std::make_unique<DistTensorParallel>(group);
}

}  // namespace saturate
