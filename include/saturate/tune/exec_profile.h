// SPDX-License-Identifier: Apache-2.0
#pragma once
// `saturate profile --exec`: one run of a user's own program with the settings the user gave,
// measured from its step lines and the samples of its process group, as a Profile — so the
// same breakdown, findings, JSON, TensorBoard and trace outputs serve it as a built-in model.
// What the profile cannot know of a foreign program is left out, not made up: the step is
// split only into data wait and the rest, and FLOPs are unknown.
//
//   ExecProfileOptions o;  o.runner.command = command;  o.runner.work_dir = dir;  o.steps = 50;
//   const ExecProfile p = run_exec_profile(o, probe_devices());
//   write_profile_table(std::cout, p.profile, diagnose(profile_facts(p.profile)));

#include <cstdint>
#include <set>
#include <string>

#include "saturate/device/probe.h"
#include "saturate/telemetry/device_sampler.h"
#include "saturate/telemetry/telemetry_sink.h"
#include "saturate/tune/exec_trial_runner.h"
#include "saturate/tune/profile.h"

namespace saturate {

struct ExecProfileOptions {
  ExecRunnerOptions runner;
  ExecSettings settings;       ///< what the user gave (max_steps is set from `steps`)
  int64_t steps = 50;          ///< steps to run; 0: the program's whole run
  int64_t skip_steps = 5;      ///< left out of the timing
  int64_t window_steps = 10;
  SamplerOptions sampler;      ///< host and GPU readings during the run
  TelemetrySink* sink = nullptr;  ///< gets every step and reading after the run (may be null)
};

struct ExecProfile {
  Profile profile;
  ExecRun run;
  std::string command_line;       ///< as run, quoted for sh
  std::set<std::string> applied;  ///< settings the program applied (§3: mapped ones count)
  std::set<std::string> ignored;  ///< passed but not applied
  std::string mode;               ///< "cooperative" | "zero-change" | "" (no start line)
};

/// Runs the program once and measures it. Throws what ExecTrialRunner throws: saturate::Error
/// for a program that never reports a step, RunFailure for one that fails.
ExecProfile run_exec_profile(const ExecProfileOptions& options, const DeviceProbe& probe);

}  // namespace saturate
