// SPDX-License-Identifier: Apache-2.0
#include "saturate/distributed/dist_env.h"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <optional>

#include "saturate/core/error.h"

namespace saturate {
namespace {

std::optional<std::string> value_of(const std::function<const char*(const char*)>& get,
                                    const char* name) {
  const char* v = get(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<int> int_of(const std::function<const char*(const char*)>& get, const char* name) {
  const std::optional<std::string> v = value_of(get, name);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  SATURATE_CHECK(errno == 0 && end != v->c_str() && *end == '\0' &&
                     x >= std::numeric_limits<int>::min() && x <= std::numeric_limits<int>::max(),
                 "dist: ", name, " must be an integer, got '", *v, "'");
  return static_cast<int>(x);
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  size_t depth = 0, end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    if (nodelist[i] == '[') ++depth;
    if (nodelist[i] == ']' && depth > 0) --depth;
    if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  const std::string entry = nodelist.substr(0, end);
  const size_t open = entry.find('[');
  if (open == std::string::npos) return entry;
  // "gpu[05-08,12]": the prefix and the first number of the range, zero padding kept.
  const std::string prefix = entry.substr(0, open);
  size_t stop = open + 1;
  while (stop < entry.size() && entry[stop] != '-' && entry[stop] != ',' && entry[stop] != ']')
    ++stop;
  SATURATE_CHECK(stop > open + 1, "dist: SLURM node list '", nodelist, "' has an empty range");
  return prefix + entry.substr(open + 1, stop - open - 1);
}

std::string DistEnv::describe() const {
  std::string s = "rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                  " (local " + std::to_string(local_rank) + " of " +
                  std::to_string(local_world_size) + ", node " + std::to_string(node_rank) + ")";
  if (is_distributed()) s += ", store " + master_addr + ":" + std::to_string(master_port);
  return s + ", " + launcher;
}

DistEnv dist_env_from(const std::function<const char*(const char*)>& get) {
  DistEnv e;
  const std::optional<int> rank = int_of(get, "RANK"), world = int_of(get, "WORLD_SIZE");
  const std::optional<int> slurm_rank = int_of(get, "SLURM_PROCID");
  const std::optional<int> slurm_world = int_of(get, "SLURM_NTASKS");
  SATURATE_CHECK(rank.has_value() == world.has_value(), "dist: ",
                 world ? "WORLD_SIZE is set without RANK" : "RANK is set without WORLD_SIZE",
                 "; a launcher sets both (torchrun, srun)");
  if (rank) {
    // saturate launch keeps torchrun's contract and marks its run id.
    e.launcher = value_of(get, "TORCHELASTIC_RUN_ID").value_or("").rfind("saturate-", 0) == 0
                     ? "saturate launch"
                     : "torchrun";
    e.rank = *rank;
    e.world_size = *world;
    e.local_rank = int_of(get, "LOCAL_RANK").value_or(e.rank);
    e.local_world_size = int_of(get, "LOCAL_WORLD_SIZE").value_or(e.world_size);
    e.node_rank = int_of(get, "GROUP_RANK").value_or(0);
    e.restart_count = int_of(get, "TORCHELASTIC_RESTART_COUNT").value_or(0);
    e.agent_store = value_of(get, "TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
    e.error_file = value_of(get, "TORCHELASTIC_ERROR_FILE").value_or("");
  } else if (slurm_rank && slurm_world) {
    e.launcher = "slurm";
    e.rank = *slurm_rank;
    e.world_size = *slurm_world;
    e.local_rank = int_of(get, "SLURM_LOCALID").value_or(0);
    e.local_world_size = int_of(get, "SLURM_NTASKS_PER_NODE").value_or(e.world_size);
    e.node_rank = int_of(get, "SLURM_NODEID").value_or(0);
  } else {
    e.launcher = "none";
  }
  SATURATE_CHECK(e.world_size >= 1, "dist: WORLD_SIZE must be at least 1, got ", e.world_size);
  SATURATE_CHECK(e.rank >= 0 && e.rank < e.world_size, "dist: RANK ", e.rank,
                 " is outside [0, ", e.world_size, ") for WORLD_SIZE ", e.world_size);
  SATURATE_CHECK(e.local_rank >= 0 && e.local_rank < e.local_world_size, "dist: LOCAL_RANK ",
                 e.local_rank, " is outside [0, ", e.local_world_size, ") for LOCAL_WORLD_SIZE ",
                 e.local_world_size);
  if (!e.is_distributed()) return e;
  std::optional<std::string> addr = value_of(get, "MASTER_ADDR");
  std::optional<int> port = int_of(get, "MASTER_PORT");
  if (e.launcher == "slurm") {
    if (!addr) {
      const auto nodes = value_of(get, "SLURM_NODELIST");
      const auto job_nodes = value_of(get, "SLURM_JOB_NODELIST");
      if (nodes || job_nodes) addr = first_slurm_host(nodes ? *nodes : *job_nodes);
    }
    if (!port) {
      const std::string job = value_of(get, "SLURM_JOB_ID").value_or("");
      const std::string tail = job.size() > 4 ? job.substr(job.size() - 4) : job;
      int digits = 0;
      for (char c : tail) digits = c >= '0' && c <= '9' ? digits * 10 + (c - '0') : digits;
      port = job.empty() ? 12910 : 15000 + digits;
    }
  }
  SATURATE_CHECK(addr.has_value(), "dist: WORLD_SIZE is ", e.world_size,
                 " but MASTER_ADDR is not set; give the address of rank 0's host");
  SATURATE_CHECK(port.has_value(), "dist: WORLD_SIZE is ", e.world_size,
                 " but MASTER_PORT is not set");
  SATURATE_CHECK(*port >= 1 && *port <= 65535, "dist: MASTER_PORT must be in [1, 65535], got ",
                 *port);
  e.master_addr = *addr;
  e.master_port = *port;
  return e;
}

DistEnv dist_env_from_environment() {
  return dist_env_from([](const char* name) { return std::getenv(name); });
}

}  // namespace saturate
