// SPDX-License-Identifier: Apache-2.0
#include "train/state_snapshot.h"

#include <cstring>
#include <sstream>

#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/models/model.h"

namespace saturate::detail {

StateSnapshot::StateSnapshot(Model& model, torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  for (const at::Tensor& t : model.state_tensors()) {
    at::Tensor host = t.detach().to(at::kCPU).contiguous();
    Saved s;
    s.bytes.resize(host.nbytes());
    if (host.nbytes() > 0) std::memcpy(s.bytes.data(), host.data_ptr(), host.nbytes());
    tensors_.push_back(std::move(s));
  }
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  optimizer_state_ = out.str();
}

void StateSnapshot::restore(Model& model, torch::optim::Optimizer& optimizer) const {
  optimizer.zero_grad(/*set_to_none=*/true);
  {
    torch::NoGradGuard no_grad;
    auto tensors = model.state_tensors();
    SATURATE_ASSERT(tensors.size() == tensors_.size(), "model changed shape since the snapshot");
    for (size_t i = 0; i < tensors.size(); ++i) {
      at::Tensor& t = tensors[i];
      SATURATE_ASSERT(static_cast<size_t>(t.nbytes()) == tensors_[i].bytes.size(),
                      "tensor ", i, " changed size since the snapshot");
      if (tensors_[i].bytes.empty()) continue;
      at::Tensor host = torch::from_blob(const_cast<uint8_t*>(tensors_[i].bytes.data()),
                                         t.sizes(), t.options().device(at::kCPU));
      t.copy_(host);
    }
  }
  // load() fills the state it finds in the archive; clearing first also drops state the probe
  // created (an optimizer that had not stepped before has none to restore).
  optimizer.state().clear();
  std::istringstream in(optimizer_state_);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer.load(archive);
}

}  // namespace saturate::detail
