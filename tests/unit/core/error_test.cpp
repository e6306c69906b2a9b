// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/error.h"

#include <gtest/gtest.h>

namespace saturate {

TEST(SaturateCheck, ThrowsErrorWithTheConcatenatedMessage) {
  try {
    SATURATE_CHECK(1 + 1 == 3, "tuner: --max-batch-size (", 4, ") is smaller than ", 8.5);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tuner: --max-batch-size (4) is smaller than 8.5");
  }
  EXPECT_NO_THROW(SATURATE_CHECK(true, "never"));
}

TEST(SaturateAssert, ThrowsInternalErrorNamingTheCondition) {
  try {
    SATURATE_ASSERT(2 < 1, "details ", 7);
    FAIL();
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("2 < 1"), std::string::npos) << what;
    EXPECT_NE(what.find("details 7"), std::string::npos) << what;
  }
}

}  // namespace saturate
