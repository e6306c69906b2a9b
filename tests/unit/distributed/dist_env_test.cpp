// SPDX-License-Identifier: Apache-2.0
// The launchers' environment contract (torchrun, srun), and each bad value named.
#include "saturate/distributed/dist_env.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

#include "saturate/core/error.h"
#include "saturate/distributed/process_group.h"

namespace saturate {
namespace {

using Env = std::map<std::string, std::string>;

DistEnv parse(const Env& env) {
  return dist_env_from([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const Env& env) {
  try {
    parse(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(DistEnv, NothingSetIsOneProcess) {
  const DistEnv e = parse({});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_FALSE(e.is_distributed());
  EXPECT_EQ(e.launcher, "none");
}

TEST(DistEnv, ReadsWhatTorchrunSets) {
  const DistEnv e = parse({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                           {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "1"},
                           {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29501"},
                           {"TORCHELASTIC_RESTART_COUNT", "2"},
                           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                           {"TORCHELASTIC_ERROR_FILE", "/tmp/err.json"}});
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29501);
  EXPECT_EQ(e.restart_count, 2);
  EXPECT_TRUE(e.agent_store);
  EXPECT_EQ(e.error_file, "/tmp/err.json");
  EXPECT_EQ(e.describe(), "rank 3 of 4 (local 1 of 2, node 1), store 10.0.0.1:29501, torchrun");
}

TEST(DistEnv, ReadsSlurmWithItsDefaultAddressAndPort) {
  const DistEnv e = parse({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                           {"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_NODEID", "1"},
                           {"SLURM_NODELIST", "gpu[07-08],cpu1"}, {"SLURM_JOB_ID", "4412345"}});
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(e.master_port, 15000 + 2345);
  EXPECT_FALSE(e.agent_store);  // rank 0 hosts the store
  // MASTER_ADDR/PORT given win; torchrun's variables win over SLURM's (torchrun inside srun).
  const DistEnv t = parse({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"RANK", "0"},
                           {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "7"}});
  EXPECT_EQ(t.launcher, "torchrun");
  EXPECT_EQ(t.world_size, 2);
  EXPECT_EQ(t.master_port, 7);
}

TEST(DistEnv, Issue15_SaturateLaunchIsNamedByItsRunId) {
  const DistEnv e = parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                           {"MASTER_PORT", "7"}, {"TORCHELASTIC_RUN_ID", "saturate-4242"}});
  EXPECT_EQ(e.launcher, "saturate launch");
  const DistEnv t = parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                           {"MASTER_PORT", "7"}, {"TORCHELASTIC_RUN_ID", "none"}});
  EXPECT_EQ(t.launcher, "torchrun");
}

TEST(DistEnv, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node7"), "node7");
  EXPECT_EQ(first_slurm_host("gpu[05-08,12],cpu1"), "gpu05");
  EXPECT_EQ(first_slurm_host("a[3],b[1-2]"), "a3");
  EXPECT_EQ(first_slurm_host("x1,x2"), "x1");
}

TEST(DistEnv, EachBadValueIsAnErrorNamingIt) {
  const Env ok = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto with = [&](Env extra) {
    Env e = ok;
    for (auto& [k, v] : extra) e[k] = v;
    return e;
  };
  EXPECT_EQ(error_of(with({{"WORLD_SIZE", "2"}})),
            "dist: WORLD_SIZE is set without RANK; a launcher sets both (torchrun, srun)");
  EXPECT_EQ(error_of(with({{"RANK", "0"}})),
            "dist: RANK is set without WORLD_SIZE; a launcher sets both (torchrun, srun)");
  EXPECT_EQ(error_of(with({{"RANK", "2"}, {"WORLD_SIZE", "2"}})),
            "dist: RANK 2 is outside [0, 2) for WORLD_SIZE 2");
  EXPECT_EQ(error_of(with({{"RANK", "-1"}, {"WORLD_SIZE", "2"}})),
            "dist: RANK -1 is outside [0, 2) for WORLD_SIZE 2");
  EXPECT_EQ(error_of(with({{"RANK", "0"}, {"WORLD_SIZE", "two"}})),
            "dist: WORLD_SIZE must be an integer, got 'two'");
  EXPECT_EQ(error_of(with({{"RANK", "0"}, {"WORLD_SIZE", "0"}})),
            "dist: WORLD_SIZE must be at least 1, got 0");
  EXPECT_EQ(error_of(with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"},
                           {"LOCAL_WORLD_SIZE", "2"}})),
            "dist: LOCAL_RANK 3 is outside [0, 2) for LOCAL_WORLD_SIZE 2");
  EXPECT_EQ(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}),
            "dist: WORLD_SIZE is 2 but MASTER_ADDR is not set; give the address of rank 0's "
            "host");
  EXPECT_EQ(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
            "dist: WORLD_SIZE is 2 but MASTER_PORT is not set");
  EXPECT_EQ(error_of(with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}})),
            "dist: MASTER_PORT must be in [1, 65535], got 70000");
  EXPECT_EQ(error_of(with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500x"}})),
            "dist: MASTER_PORT must be an integer, got '29500x'");
}

TEST(DistBackend, ParsesResolvesAndRefusesNcclWithoutCuda) {
  EXPECT_EQ(parse_dist_backend("gloo"), DistBackend::kGloo);
  EXPECT_EQ(resolve_dist_backend(DistBackend::kAuto, c10::Device("cpu")), DistBackend::kGloo);
  try {
    parse_dist_backend("glo");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "dist: unknown --backend 'glo'; did you mean 'gloo'?");
  }
  try {
    resolve_dist_backend(DistBackend::kNccl, c10::Device("cpu"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--backend nccl"), std::string::npos) << e.what();
  }
}

TEST(DistGroup, AWorldOfOneNeedsNoStoreAndItsCollectivesAreIdentities) {
  const DistEnv env;  // no launcher
  auto g = init_process_group(env, DistBackend::kAuto, c10::Device("cpu"),
                              std::chrono::seconds(10));
  EXPECT_EQ(g->world_size(), 1);
  std::vector<at::Tensor> t = {at::arange(4, at::kFloat)};
  g->allreduce_sum(t);
  EXPECT_TRUE(t[0].equal(at::arange(4, at::kFloat)));
  const auto all = g->allgather({1.5, 2.5});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], (std::vector<double>{1.5, 2.5}));
  g->barrier();
}

}  // namespace saturate
