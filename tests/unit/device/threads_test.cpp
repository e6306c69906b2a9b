// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/threads.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/core/log.h"

namespace saturate {
namespace {

// Restores LibTorch's thread count and the log sink after each test.
class ConfigureThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_threads_ = at::get_num_threads();
    log::set_sink([this](log::Level level, const std::string& message) {
      if (level == log::Level::kWarn) warnings_.push_back(message);
    });
  }
  void TearDown() override {
    log::set_sink(nullptr);
    at::set_num_threads(saved_threads_);
  }
  int saved_threads_ = 1;
  std::vector<std::string> warnings_;
};

TEST(UsableCores, AtLeastOne) { EXPECT_GE(usable_cores(), 1); }

TEST_F(ConfigureThreads, SetsRequestedCount) {
  EXPECT_EQ(configure_threads(1), 1);
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(ConfigureThreads, ZeroMeansUsableCores) {
  EXPECT_EQ(configure_threads(0), usable_cores());
  EXPECT_EQ(at::get_num_threads(), usable_cores());
}

TEST_F(ConfigureThreads, WarnsAboveUsableCores) {
  const int more = usable_cores() + 1;
  EXPECT_EQ(configure_threads(more), more);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("usable cores"), std::string::npos) << warnings_[0];
}

TEST_F(ConfigureThreads, RejectsNegative) {
  try {
    configure_threads(-2);
    FAIL() << "expected saturate::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("threads: --threads must be >= 0"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("got -2"), std::string::npos);
  }
}

}  // namespace
// Denormals: 1e-39 is below float's smallest normal (1.2e-38). Flushed, arithmetic treats it
// as zero (DAZ) and never produces one (FTZ); kept, it survives a multiplication by one. The
// large tensor runs on LibTorch's intra-op threads, created after the call (ctest runs each
// test in its own process), which inherit the mode: the promise `train` relies on.
TEST(ConfigureDenormals, FlushedOnTheCallingThreadAndTheThreadsItStartsLater) {
  if (!configure_denormals(true)) GTEST_SKIP() << "this CPU cannot flush denormals";
  at::set_num_threads(2);
  const torch::Tensor small = torch::full({8}, 1e-39f) * 1.0f;
  EXPECT_EQ(small.count_nonzero().item<int64_t>(), 0);
  const torch::Tensor large = torch::full({1 << 20}, 1e-39f) * 1.0f;
  EXPECT_EQ(large.count_nonzero().item<int64_t>(), 0);
  configure_denormals(false);
}

TEST(ConfigureDenormals, KeptTheyStayDenormal) {
  EXPECT_FALSE(configure_denormals(false));
  const torch::Tensor small = torch::full({8}, 1e-39f) * 1.0f;
  EXPECT_EQ(small.count_nonzero().item<int64_t>(), 8);
}

TEST(ConfigureHostAllocator, GlibcTakesTheSettings) {
#if defined(__GLIBC__)
  EXPECT_TRUE(configure_host_allocator());
#else
  EXPECT_FALSE(configure_host_allocator());
#endif
}

}  // namespace saturate
