// SPDX-License-Identifier: Apache-2.0
#pragma once
// resolve_program(): a command's first word as execve needs it — a path as given (checked that
// it can run), else the first executable file of that name in PATH.
//
//   const std::string exe = resolve_program("python3", "tune --exec");  // "/usr/bin/python3"

#include <string>

namespace saturate {

/// Throws saturate::Error starting with `component` when `name` cannot be run or found.
std::string resolve_program(const std::string& name, const char* component);

}  // namespace saturate
