// SPDX-License-Identifier: Apache-2.0
// One rank of the multi-process dist tests; tests/dist/run_ranks.py starts several with the
// launcher's environment. Prints "rank R ok" and exits 0 when every check holds; a
// saturate::Error exits 2 with its message, anything else 1.
//
//   dist_worker collectives [TIMEOUT_S]
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/dist/dist_env.h"
#include "saturate/dist/process_group.h"

namespace saturate {
namespace {

#define EXPECT_OR_FAIL(cond, ...) SATURATE_ASSERT(cond, __VA_ARGS__)

void collectives(DistGroup& g) {
  const int r = g.rank(), w = g.world_size();
  std::vector<at::Tensor> t = {torch::full({3}, static_cast<float>(r + 1))};
  g.allreduce_sum(t);
  const float want = static_cast<float>(w * (w + 1) / 2);
  EXPECT_OR_FAIL(t[0].eq(want).all().item<bool>(), "all-reduce gave ", t[0], ", want ", want);
  std::vector<at::Tensor> b = {torch::full({2}, static_cast<float>(r == 0 ? 42 : -1))};
  g.broadcast(b, 0);
  EXPECT_OR_FAIL(b[0].eq(42).all().item<bool>(), "broadcast gave ", b[0]);
  const auto all = g.allgather({static_cast<double>(r), 10.0 * r});
  EXPECT_OR_FAIL(static_cast<int>(all.size()) == w, "all-gather gave ", all.size(), " ranks");
  for (int i = 0; i < w; ++i)
    EXPECT_OR_FAIL(all[i][0] == i && all[i][1] == 10.0 * i, "all-gather rank ", i, " wrong");
  g.barrier();
}

}  // namespace
}  // namespace saturate

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a dead peer's socket must be an error, not a signal
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  const double timeout_s = argc > 2 ? std::atof(argv[2]) : 30.0;
  try {
    const saturate::DistEnv env = saturate::dist_env_from_environment();
    auto g = saturate::init_process_group(
        env, saturate::DistBackend::kGloo, c10::Device("cpu"),
        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    if (mode == "collectives") saturate::collectives(*g);
    else SATURATE_CHECK(false, "dist_worker: unknown mode '", mode, "'");
    std::cout << "rank " << env.rank << " ok" << std::endl;
    return 0;
  } catch (const saturate::Error& e) {
    std::cerr << "dist_worker: error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dist_worker: failure: " << e.what() << std::endl;
    return 1;
  }
}
