// SPDX-License-Identifier: Apache-2.0
#pragma once
// How a run of a user's program is asked for (docs/exec-protocol.md §2, §3): the settings of a
// RunConfig as the protocol's names and texts, the command with --map flags and {placeholders}
// filled in, the environment of one run, and the shell line that reproduces a tuned run.
//
//   ExecCommand c;  c.argv = {"python", "train.py", "--bs={batch_size}"};
//   c.maps = {parse_exec_map("num_workers=--workers")};
//   check_exec_command(c, {"batch_size", "num_workers", ...});     // §3's usage errors, exit 2
//   const ExecSettings s = exec_settings(config, /*max_steps=*/20, /*pin_memory=*/false);
//   std::vector<std::string> argv = exec_argv(c, s);   // python train.py --bs=64 --workers 2

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "saturate/telemetry/exec_protocol.h"
#include "saturate/tune/trial.h"

namespace saturate {

/// The eight settings of the protocol, in its order: batch_size, grad_accum, precision,
/// num_workers, prefetch, pin_memory, max_steps, seed.
const std::vector<std::string>& exec_setting_names();

/// Setting name → its value as text; only the settings a run sets ("absent: the program's own").
using ExecSettings = std::map<std::string, std::string>;

struct ExecCommand {
  std::vector<std::string> argv;  ///< the words after `--`, {placeholders} included
  std::vector<std::pair<std::string, std::string>> maps;  ///< setting → the program's flag
  bool metrics_on_stdout = false;  ///< no SATURATE_METRICS: prefixed stdout lines
  /// Prepended to PYTHONPATH so an unmodified script reports through the zero-change hook
  /// (§9); empty: not added.
  std::string autohook_dir;
};

/// "NAME=FLAG" of --map; saturate::Error (exit 2) naming an unknown NAME (with "did you mean")
/// or a text without '=' or FLAG.
std::pair<std::string, std::string> parse_exec_map(const std::string& text);

/// §3's checks before any run: a command; a mapped flag that is the last word (no value after
/// it); a {placeholder} of a setting that is not in `always_set` (some run would leave it
/// unset). saturate::Error (exit 2) naming what is wrong.
void check_exec_command(const ExecCommand& command, const std::set<std::string>& always_set);

/// The {placeholders} the command uses.
std::set<std::string> exec_placeholders(const ExecCommand& command);

/// The command of a run that sets `settings`: §3's --map rules and placeholders applied.
std::vector<std::string> exec_argv(const ExecCommand& command, const ExecSettings& settings);

/// What a run of `config` sets: batch_size (the micro-batch), grad_accum, precision,
/// num_workers, prefetch and seed, max_steps when > 0, pin_memory when `pin_memory`.
ExecSettings exec_settings(const RunConfig& config, int64_t max_steps, bool pin_memory);

/// The environment of one run: SATURATE_PROTOCOL, _TRIAL, _RUN_DIR, _METRICS (unless on
/// stdout), one SATURATE_<NAME> per setting, TORCHELASTIC_ERROR_FILE, PYTHONUNBUFFERED and,
/// with an autohook folder, PYTHONPATH.
std::vector<std::pair<std::string, std::string>> exec_environment(
    const ExecCommand& command, const ExecSettings& settings, const std::string& trial,
    const std::string& run_dir);

/// The metrics file of a run in `run_dir` ("" when on stdout).
std::string exec_metrics_path(const ExecCommand& command, const std::string& run_dir);

/// The settings the program really applied: its start line's `applied` names, plus every
/// setting passed through a --map or a placeholder (§3), less max_steps.
std::set<std::string> exec_applied(const ExecCommand& command, const ExecSettings& passed,
                                   const ExecStart* start);

/// The variables that give a program `settings` outside saturate: SATURATE_PROTOCOL,
/// SATURATE_METRICS=/dev/null (the settings read, the lines discarded) and one per setting.
std::vector<std::pair<std::string, std::string>> exec_standalone_environment(
    const ExecSettings& settings);

/// A shell line that runs the program with `settings` outside saturate: the protocol's
/// variables with SATURATE_METRICS=/dev/null (the program's settings read, its lines
/// discarded), then the command, each word quoted for sh.
std::string exec_reproduce_line(const ExecCommand& command, const ExecSettings& settings);

/// `word` quoted for a POSIX shell when it needs it.
std::string shell_quote(const std::string& word);

}  // namespace saturate
