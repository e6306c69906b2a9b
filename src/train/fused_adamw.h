// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private: AdamW whose step is one fused kernel per parameter group (at::_fused_adamw_, CPU
// since LibTorch 2.4, CUDA before) instead of LibTorch's C++ AdamW, which walks each parameter
// with about eight separate element-wise passes and two temporaries. Same update, same state
// (torch::optim::AdamWParamState: a checkpoint, the noise-scale preconditioner and a resume see
// no difference); groups the kernel cannot take (AMSGrad, mixed devices or dtypes, sparse
// gradients) take the unfused step.

#include <torch/torch.h>

namespace saturate::detail {

class FusedAdamW final : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace saturate::detail
