// SPDX-License-Identifier: Apache-2.0
// Recomputation must actually drop activations: measure the heap a training forward leaves
// allocated for backward, with and without segments.
#include <malloc.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/models/model.h"

namespace saturate {
namespace {

// Bytes glibc's malloc has handed out and not had back: the main arena's in-use bytes plus
// mmap'ed chunks. Activations are large allocations made on the calling thread, so they land
// in one of the two; worker threads' arenas only hold small scratch buffers.
int64_t live_heap_bytes() {
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<int64_t>(mi.uordblks + mi.hblkhd);
}

// Heap bytes still allocated after forward (the graph and what it saved), before backward.
int64_t bytes_held_by_forward(Model& model, const at::Tensor& x) {
  const int64_t before = live_heap_bytes();
  at::Tensor out = model.forward(x);
  const int64_t held = live_heap_bytes() - before;
  out.sum().backward();  // the graph is usable: backward runs and frees it
  return held;
}

}  // namespace

TEST(RecomputeMemory, SegmentsHoldFarLessThanPlainAutograd) {
  torch::manual_seed(0);
  auto model = make_model("mlp-deep", {{784}, 10});
  const at::Tensor x = torch::randn({256, 784});  // 512 KiB per 512-wide activation
  bytes_held_by_forward(*model, x);               // warm-up: one-time allocator and BLAS state

  const int64_t plain = bytes_held_by_forward(*model, x);
  ASSERT_TRUE(model->set_recompute_segments(4));
  const int64_t ckpt = bytes_held_by_forward(*model, x);
  RecordProperty("plain_held_bytes", std::to_string(plain));
  RecordProperty("recompute_held_bytes", std::to_string(ckpt));
  std::printf("forward holds %lld bytes plain, %lld bytes with 4 recompute segments\n",
              static_cast<long long>(plain), static_cast<long long>(ckpt));
  // Each of the 12 blocks saves its ReLU output, its dropout mask and its dropout output:
  // 3 x 512 KiB, 18 MiB in all. Four segments keep three segment inputs (1.5 MiB).
  EXPECT_GT(plain, 12 * 3 * 512 * 1024 * 9 / 10);
  EXPECT_LT(ckpt, plain / 2);
}

}  // namespace saturate
