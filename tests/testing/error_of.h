// SPDX-License-Identifier: Apache-2.0
#pragma once
// The message of the saturate::Error a callable throws, for tests that check what an error says.

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

}  // namespace saturate::testing
