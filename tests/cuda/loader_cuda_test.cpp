// SPDX-License-Identifier: Apache-2.0
// The Loader's side-stream copies to a GPU. Skips without CUDA.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/data/loader.h"

namespace saturate {

TEST(LoaderCuda, BatchesArriveOnTheDeviceEqualToTheHostOnes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "requires CUDA";
  const auto source = make_synthetic_source("synthetic:3,16,16,10,500");
  LoaderOptions o;
  o.batch_size = 64;
  o.workers = 2;
  o.transform.flip = true;
  Loader host(*source, o);
  o.cuda_device = 0;
  Loader device(*source, o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    host.start_epoch(epoch);
    device.start_epoch(epoch);
    while (auto h = host.next()) {
      auto d = device.next();
      ASSERT_TRUE(d.has_value());
      ASSERT_TRUE(d->inputs.is_cuda());
      // Work queued on the current stream sees the finished copy.
      EXPECT_TRUE(torch::equal(d->inputs.sum(0).cpu(), h->inputs.sum(0)));
      EXPECT_TRUE(torch::equal(d->targets.cpu(), h->targets));
    }
    EXPECT_FALSE(device.next().has_value());
  }
}

}  // namespace saturate
