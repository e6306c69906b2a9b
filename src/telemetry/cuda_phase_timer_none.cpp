// SPDX-License-Identifier: Apache-2.0
// Built when LibTorch has no CUDA: there are no CUDA events to time with.
#include "saturate/core/error.h"
#include "saturate/telemetry/phase_timer.h"

namespace saturate {

std::unique_ptr<PhaseTimer> make_cuda_phase_timer(int index) {
  SATURATE_CHECK(false, "telemetry: cannot time cuda:", index,
                 " with CUDA events: this LibTorch was built without CUDA");
  return nullptr;
}

}  // namespace saturate
