// SPDX-License-Identifier: Apache-2.0
#pragma once
// The message of the saturate::Error a callable throws, and a check that a text contains a part,
// for tests that check what an error says.

#include <string>

#include <gtest/gtest.h>

#include "saturate/core/error.h"

namespace saturate::testing {

/// The what() of the saturate::Error `fn` throws, or "" with a test failure when it throws none.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected saturate::Error";
  return "";
}

/// EXPECT_TRUE(contains(error, "sample 4")): on failure, prints both texts.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

}  // namespace saturate::testing
