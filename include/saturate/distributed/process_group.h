// SPDX-License-Identifier: Apache-2.0
#pragma once
// DistGroup: the ranks of a data-parallel job joined over c10d (PyTorch's own distributed
// engine: Gloo for CPU tensors, NCCL for CUDA ones), behind a header that needs no c10d
// includes. Rendezvous goes through a TCPStore at MASTER_ADDR:MASTER_PORT, hosted by rank 0 or,
// under torchrun, by its agent; keys carry the restart attempt so a restarted job never reads
// a previous attempt's addresses.
//
//   const DistEnv env = dist_env_from_environment();
//   auto group = init_process_group(env, DistBackend::kAuto, device, std::chrono::seconds(60));
//   group->allreduce_sum(grads);

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "saturate/distributed/dist_env.h"

namespace saturate {

enum class DistBackend { kAuto, kGloo, kNccl };
/// "auto" | "gloo" | "nccl"; throws saturate::Error with a suggestion otherwise.
DistBackend parse_dist_backend(const std::string& name);
std::string to_string(DistBackend backend);
/// kAuto resolved for `device`: NCCL for CUDA, Gloo otherwise. NCCL on a CPU device (or in a
/// build without CUDA) is a saturate::Error.
DistBackend resolve_dist_backend(DistBackend requested, const c10::Device& device);

class DistGroup {
 public:
  struct Impl;
  explicit DistGroup(std::unique_ptr<Impl> impl);
  ~DistGroup();
  DistGroup(const DistGroup&) = delete;
  DistGroup& operator=(const DistGroup&) = delete;

  int rank() const;
  int world_size() const;
  DistBackend backend() const;
  std::chrono::milliseconds timeout() const;

  /// Collectives, blocking until done (or the group's timeout, which throws saturate::Error).
  /// Tensors live on the group's device (CPU for Gloo); they are changed in place.
  void broadcast(std::vector<at::Tensor>& tensors, int root = 0);
  void allreduce_sum(std::vector<at::Tensor>& tensors);
  /// Every rank's `values` (the same length on each), in rank order.
  std::vector<std::vector<double>> allgather(const std::vector<double>& values);
  /// Every rank's `bytes` (any length), in rank order.
  std::vector<std::string> allgather_bytes(const std::string& bytes);
  void barrier();
  /// Point to point, for pipeline stages. send() starts sending `tensor` (contiguous, on the
  /// group's device) to rank `peer` under `tag` and returns at once; the tensor is kept alive
  /// and must not change until wait_sends(). recv() fills `tensor` (shaped and typed as the
  /// sent one) from `peer` under `tag`, blocking up to the group's timeout.
  void send(const at::Tensor& tensor, int peer, int tag);
  void recv(at::Tensor& tensor, int peer, int tag);
  /// A receive posted ahead of its use: Gloo moves a message only once its receive is posted,
  /// so a stage that posts the next one before it computes finds the data there when it needs
  /// it. wait() returns `tensor` filled, blocking as recv() does; a PendingRecv dropped
  /// unwaited is only for a step that failed.
  class PendingRecv {
   public:
    PendingRecv() = default;
    at::Tensor wait();

   private:
    friend class DistGroup;
    struct State;
    std::shared_ptr<State> state_;
  };
  PendingRecv post_recv(at::Tensor tensor, int peer, int tag);
  /// Waits for every send started since the last call.
  void wait_sends();
  /// For a rank 0 that works alone for a while (a one-process measurement) while the others
  /// idle: rank 0 calls it when done; every other rank waits for that up to `timeout`, which may
  /// be far longer than the group's (a barrier there would fail at --dist-timeout). Throws
  /// saturate::Error naming `what` when rank 0 does not finish in time.
  void wait_for_rank0(const std::string& what, std::chrono::milliseconds timeout);

  /// The ranks of this group that ran on this machine (same boot, same PID namespace) and have
  /// exited since the group formed: "rank 1 (pid 4242)", "ranks 1 (pid 4242), 3 (pid 4250)";
  /// "" when none has or nothing can be known (ranks on other hosts). For the message of a
  /// collective that failed: waits up to `settle` for an exiting peer to be gone.
  std::string exited_peers(std::chrono::milliseconds settle = std::chrono::milliseconds(1000)) const;

  /// A group of some of this group's ranks (`ranks`, in the new group's rank order; this rank
  /// must be among them) over the same store under `name`: for a pipeline's stages within a
  /// replica and a stage's replicas. Every rank in `ranks`, and only those, calls it with the
  /// same arguments. Its failures are std::runtime_error naming the group.
  std::unique_ptr<DistGroup> subgroup(const std::vector<int>& ranks, const std::string& name);

  /// For modules of saturate that drive c10d directly (the gradient reducer).
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Joins the job `env` describes. A world of one still gets a group (collectives are then
/// no-ops on one rank). Failures to reach the store or the peers within `timeout` are a
/// saturate::Error naming MASTER_ADDR:MASTER_PORT and the rank.
std::unique_ptr<DistGroup> init_process_group(const DistEnv& env, DistBackend backend,
                                              const c10::Device& device,
                                              std::chrono::milliseconds timeout);

}  // namespace saturate
