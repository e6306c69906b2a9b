// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where this process sits in a data-parallel job, read from the environment that launchers set:
// torchrun (or anything that keeps its contract) or SLURM's srun. A process started
// by hand with none of it is rank 0 of a world of 1.
//
//   const DistEnv env = dist_env_from_environment();
//   if (env.is_distributed()) group = init_process_group(env, DistBackend::kAuto, timeout);

#include <cstdint>
#include <functional>
#include <string>

namespace saturate {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr;   ///< where the rendezvous store listens (rank 0's host)
  int master_port = 0;
  int restart_count = 0;     ///< TORCHELASTIC_RESTART_COUNT: store keys are prefixed with it
  bool agent_store = false;  ///< torchrun hosts the store (every rank is a client)
  std::string error_file;    ///< TORCHELASTIC_ERROR_FILE: where a failing rank says why
  std::string launcher;      ///< "torchrun", "saturate launch", "slurm" or "none"

  bool is_distributed() const { return world_size > 1; }
  /// "rank 1 of 2 (local 1 of 2, node 0), store 127.0.0.1:29500, torchrun"
  std::string describe() const;
};

/// Reads the variables through `get` (returns null for an unset name). torchrun's RANK /
/// WORLD_SIZE win over SLURM's; under SLURM, MASTER_ADDR defaults to the first host of
/// SLURM_NODELIST (or SLURM_JOB_NODELIST) and MASTER_PORT to 15000 + the last four digits of
/// SLURM_JOB_ID. Throws saturate::Error naming the variable for a value that is not an integer,
/// WORLD_SIZE without RANK (or the reverse), a rank outside [0, WORLD_SIZE), a world of more than
/// one without MASTER_ADDR, or a port outside [1, 65535].
DistEnv dist_env_from(const std::function<const char*(const char*)>& get);
/// The same, from this process's environment.
DistEnv dist_env_from_environment();

/// The first host of a SLURM node list: "gpu[05-08,12],cpu1" → "gpu05", "node7" → "node7".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace saturate
