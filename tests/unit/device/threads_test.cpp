// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/threads.h"

#include <ATen/Parallel.h>
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
}  // namespace saturate
