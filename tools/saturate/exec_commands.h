// SPDX-License-Identifier: Apache-2.0
#pragma once
// `saturate profile --exec -- CMD...`, `saturate tune --exec -- CMD...` and `saturate train
// --config` of a plan for a program: a user's own training program run under the exec
// protocol (docs/exec-protocol.md).

#include <cstdint>
#include <string>
#include <vector>

namespace saturate {
struct Plan;
}

namespace saturate::cli {

/// True when `--exec` comes before any `--` in `args`.
bool wants_exec(const std::vector<std::string>& args);

int run_profile_exec(const std::vector<std::string>& args);
int run_tune_exec(const std::vector<std::string>& args);

/// Replaces this process with the plan's program and its tuned settings (`steps` > 0: that many
/// steps). Returns only when it cannot (with an Error).
int run_exec_plan(const Plan& plan, int64_t steps);

}  // namespace saturate::cli
