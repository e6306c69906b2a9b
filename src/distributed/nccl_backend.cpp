// SPDX-License-Identifier: Apache-2.0
// The NCCL backend, apart: ProcessGroupNCCL.hpp needs the nccl.h torch was built against (from
// the wheel's nvidia/nccl), which no other file should see.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace saturate {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout) {
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, o);
}

}  // namespace saturate
