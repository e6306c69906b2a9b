// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/preflight.h"

#include <sstream>
#include <string>

#include "saturate/core/error.h"

namespace saturate {
namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// A CUDA device without an index ("cuda") accepts every ordinal; the CPU has only one.
bool is_on(const c10::Device& actual, const c10::Device& wanted) {
  if (actual.type() != wanted.type()) return false;
  if (wanted.is_cpu() || !wanted.has_index()) return true;
  return actual.index() == wanted.index();
}

}  // namespace

void check_same_device(const std::vector<at::Tensor>& parameters,
                       const std::vector<at::Tensor>& batch, const c10::Device& device) {
  const std::string target = device.str();
  const at::Tensor* first = nullptr;
  size_t first_index = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const at::Tensor& p = parameters[i];
    if (!p.defined()) continue;
    SATURATE_CHECK(is_on(p.device(), device), "preflight: parameter ", i, " (shape ", shape_of(p),
                   ") is on ", p.device(), " but training runs on ", target, "; call model.to(",
                   target, ") before creating the optimizer");
    if (first == nullptr) {
      first = &p;
      first_index = i;
    }
    // Only reachable when `device` has no index: "cuda" matches cuda:0 and cuda:1 alike.
    SATURATE_CHECK(p.device() == first->device(),
                   "preflight: the model's parameters are on different devices: parameter ",
                   first_index, " (shape ", shape_of(*first), ") is on ", first->device(),
                   ", parameter ", i, " (shape ", shape_of(p), ") on ", p.device(),
                   "; call model.to(", first->device(), ") to put them all on one device");
  }
  // With an index-less `device` the batch must still meet the parameters on their ordinal.
  const c10::Device model_device = first != nullptr ? first->device() : device;
  const std::string batch_target = model_device.str();
  for (size_t i = 0; i < batch.size(); ++i) {
    const at::Tensor& b = batch[i];
    if (!b.defined()) continue;
    SATURATE_CHECK(is_on(b.device(), model_device), "preflight: batch tensor ", i, " (shape ",
                   shape_of(b), ") is on ", b.device(), " but training runs on ", batch_target,
                   "; move the batch with .to(", batch_target, ")");
  }
}

}  // namespace saturate
