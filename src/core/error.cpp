// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/error.h"

namespace saturate::detail {

void throw_error(const std::string& message) { throw Error(message); }
void throw_run_failure(const std::string& message) { throw RunFailure(message); }

void throw_internal(const char* file, int line, const char* cond, const std::string& message) {
  std::string text = concat("internal error at ", file, ":", line, ": ", cond);
  if (!message.empty()) text += concat(": ", message);
  throw InternalError(text);
}

}  // namespace saturate::detail
