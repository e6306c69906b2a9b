// SPDX-License-Identifier: Apache-2.0
#include "saturate/distributed/agreed_clock.h"

#include <chrono>

namespace saturate {

std::function<double()> agreed_elapsed_s(DistGroup& group, const std::atomic<bool>& local_stop,
                                         std::atomic<bool>& agreed_stop) {
  const auto start = std::chrono::steady_clock::now();
  DistGroup* g = &group;
  const std::atomic<bool>* mine_stop = &local_stop;
  std::atomic<bool>* agreed = &agreed_stop;
  return [g, start, mine_stop, agreed] {
    const double mine =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto all = g->allgather({mine, mine_stop->load() ? 1.0 : 0.0});
    for (const auto& r : all)
      if (r[1] != 0) agreed->store(true);
    return all[0][0];
  };
}

}  // namespace saturate
