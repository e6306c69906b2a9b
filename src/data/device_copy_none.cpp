// SPDX-License-Identifier: Apache-2.0
// Built when LibTorch has no CUDA: batches stay on the host.
#include "data/device_copy.h"
#include "saturate/core/error.h"

namespace saturate::detail {

std::unique_ptr<DeviceCopier> make_device_copier(int index, int) {
  SATURATE_CHECK(false, "loader: cannot copy batches to cuda:", index,
                 ": this LibTorch was built without CUDA");
  return nullptr;
}

}  // namespace saturate::detail
