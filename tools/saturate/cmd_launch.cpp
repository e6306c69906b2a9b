// SPDX-License-Identifier: Apache-2.0
// saturate launch: start this node's ranks of a data-parallel job with torchrun's environment
// contract, relay their output with a rank prefix, pass signals on, and stop the job with the
// failed rank named when one fails.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <iostream>

#include "command.h"
#include "saturate/core/error.h"
#include "saturate/distributed/launcher.h"

namespace saturate::cli {

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  SATURATE_CHECK(n > 0, "launch: cannot find the saturate executable (/proc/self/exe): ",
                 std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

int report_launch(const LaunchOptions& o, const LaunchResult& r) {
  if (r.failed_rank >= 0) {
    const std::string line = "saturate: error: launch: rank " + std::to_string(r.failed_rank) +
                             " of " + std::to_string(o.nproc_per_node * o.nnodes) +
                             " failed first: " + r.reason + "\n";
    std::cerr << line << std::flush;
  }
  return r.exit_code;
}

int run_as_ranks(int ranks, const char* command, const std::vector<std::string>& args) {
  LaunchOptions o;
  o.nproc_per_node = ranks;
  o.command = {self_executable(), command};
  o.command.insert(o.command.end(), args.begin(), args.end());
  return report_launch(o, launch(o, std::cout, std::cerr));
}

int run_launch(const std::vector<std::string>& args) {
  const auto dashes = std::find(args.begin(), args.end(), "--");
  const std::vector<std::string> own(args.begin(), dashes);
  LaunchOptions o;
  o.master_addr.clear();  // 127.0.0.1 on one node; needed with several
  CLI::App app{"Start this node's ranks of a data-parallel job, torchrun-style:\n"
               "  saturate launch --nproc-per-node 2 -- train --data fashion-mnist --steps 500\n"
               "A command after '--' that is one of saturate's runs this saturate; anything "
               "else runs as given.\nEach rank gets RANK, WORLD_SIZE, LOCAL_RANK, "
               "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_ERROR_FILE.",
               "saturate launch"};
  app.add_option("--nproc-per-node", o.nproc_per_node, "ranks on this node")->capture_default_str();
  app.add_option("--nnodes", o.nnodes, "nodes in the job (one launcher per node)")
      ->capture_default_str();
  app.add_option("--node-rank", o.node_rank, "this node's index, 0 .. nnodes-1")
      ->capture_default_str();
  app.add_option("--master-addr", o.master_addr,
                 "address of node 0, where rank 0 hosts the store (default 127.0.0.1 on one "
                 "node)");
  app.add_option("--master-port", o.master_port,
                 "port of the store; default a free port (one node only)");
  app.add_option("--grace", o.grace_s,
                 "seconds the ranks get after SIGTERM (one rank failed, or SIGTERM/SIGHUP came) "
                 "before SIGKILL; Ctrl-C waits for them to stop")
      ->capture_default_str();
  bool no_prefix = false;
  app.add_flag("--no-prefix", no_prefix, "relay the ranks' output without \"[rank N] \"");
  if (!parse_args(app, own)) return 0;
  o.prefix = !no_prefix;
  SATURATE_CHECK(dashes != args.end() && dashes + 1 != args.end(),
                 "launch: no command to run: give it after '--', e.g. saturate launch "
                 "--nproc-per-node 2 -- train --steps 100");
  o.command.assign(dashes + 1, args.end());
  const bool is_ours = std::any_of(commands().begin(), commands().end(), [&](const Command& c) {
    return o.command[0] == c.name;
  });
  SATURATE_CHECK(o.command[0] != "launch", "launch: the command after '--' cannot be launch");
  if (is_ours) o.command.insert(o.command.begin(), self_executable());
  return report_launch(o, launch(o, std::cout, std::cerr));
}

}  // namespace saturate::cli
