// SPDX-License-Identifier: Apache-2.0
#pragma once
// launch(): starts this node's ranks of a data-parallel job with the environment torchrun gives
// its workers (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_ERROR_FILE), prefixes each line a rank
// writes with "[rank N] ", forwards SIGINT/SIGTERM/SIGHUP to every rank, and when one rank fails
// stops the others (SIGTERM, then SIGKILL after the grace period) and says which rank failed
// first and why (its error file's message, else its last line on stderr, else how it ended).
//
//   LaunchOptions o;
//   o.nproc_per_node = 2;
//   o.command = {"/usr/bin/saturate", "train", "--steps", "100"};
//   const LaunchResult r = launch(o, std::cout, std::cerr);

#include <atomic>
#include <iosfwd>
#include <string>
#include <vector>

namespace saturate {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  ///< 0: a free port of this host (one node only)
  /// argv of every rank; command[0] is a path, or a name looked up in PATH.
  std::vector<std::string> command;
  double grace_s = 10;  ///< after a failure or a forwarded SIGTERM/SIGHUP, before SIGKILL
  bool prefix = true;   ///< "[rank N] " before each line of the ranks' output
  bool quiet = false;   ///< no info line at the start (warnings about failures stay)
  /// A rank's failure as a warning line; off for a caller that reports it itself (the tune's
  /// ranks stage, which records each failed run).
  bool warn_on_failure = true;
};

struct LaunchResult {
  /// 0 when every rank exited 0; else the first failed rank's exit code (1 when a signal ended
  /// it), or 128 + the signal the launcher itself received and forwarded.
  int exit_code = 0;
  int failed_rank = -1;  ///< global rank that failed first, -1 when none did
  std::string reason;    ///< "exited with code 1: <its error line>", "killed by SIGKILL", ...
  int master_port = 0;   ///< the port the job used
};

/// Checks `o` (throws saturate::Error naming the flag for a bad count, rank, port or an empty
/// command, or a command that is not found), then runs the ranks to the end. Lines of the
/// ranks' stdout go to `out`, their stderr and the launcher's own messages to `err`.
LaunchResult launch(const LaunchOptions& o, std::ostream& out, std::ostream& err);

/// A TCP port nobody listens on now (bound to port 0 and released).
int pick_free_port();

}  // namespace saturate
