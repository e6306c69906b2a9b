// SPDX-License-Identifier: Apache-2.0
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include "distributed/process_group_impl.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"

namespace saturate {

#if SATURATE_HAS_NCCL
// nccl_backend.cpp: the only file that includes ProcessGroupNCCL.hpp (and so nccl.h).
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout);
#endif

namespace {

std::string where(const DistEnv& env) {
  return env.master_addr + ":" + std::to_string(env.master_port);
}

c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo_options(std::chrono::milliseconds timeout) {
  auto o = c10d::ProcessGroupGloo::Options::create(timeout);
  // As torch.distributed does: one device per interface in GLOO_SOCKET_IFNAME, else the
  // default (the hostname's address, else loopback). Gloo refuses an empty list.
  const char* ifnames = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifnames != nullptr && *ifnames != '\0') {
    std::stringstream list(ifnames);
    std::string name;
    while (std::getline(list, name, ','))
      if (!name.empty()) o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
  }
  if (o->devices.empty()) o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  o->threads = 2 * static_cast<int>(o->devices.size());
  return o;
}

// This process's machine as far as PIDs go: the boot and the PID namespace ("" when unknown).
std::string pid_machine() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(boot >> id)) return "";
  char ns[128];
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  return n > 0 ? id + "/" + std::string(ns, static_cast<size_t>(n)) : "";
}

// The c10d group of `size` ranks over `store`: Gloo for CPU tensors (and CUDA ones when Gloo is
// the backend), NCCL for CUDA ones when it is.
c10::intrusive_ptr<c10d::ProcessGroup> make_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int size, DistBackend backend,
                                                  const c10::Device& device,
                                                  std::chrono::milliseconds timeout) {
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("gloo/", store), rank, size, gloo_options(timeout));
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  if (backend == DistBackend::kGloo) {
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    // Gloo also carries CUDA tensors (through host memory) when NCCL is not wanted.
    if (device.is_cuda())
      group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, gloo);
  }
#if SATURATE_HAS_NCCL
  if (backend == DistBackend::kNccl) {
    auto nccl = make_nccl_backend(c10::make_intrusive<c10d::PrefixStore>("nccl/", store), rank,
                                  size, timeout);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
    group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
  }
#else
  (void)device;
#endif
  return group;
}

// Whether `pid` on this machine has ended (gone, or a zombie nobody has reaped yet).
bool has_exited(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z' ||
         line[paren + 2] == 'X';
}

}  // namespace

DistBackend parse_dist_backend(const std::string& name) {
  if (name == "auto") return DistBackend::kAuto;
  if (name == "gloo") return DistBackend::kGloo;
  if (name == "nccl") return DistBackend::kNccl;
  SATURATE_CHECK(false, "dist: unknown --backend '", name, "'",
                 did_you_mean(name, {"auto", "gloo", "nccl"}));
  return DistBackend::kAuto;
}

std::string to_string(DistBackend backend) {
  switch (backend) {
    case DistBackend::kAuto: return "auto";
    case DistBackend::kGloo: return "gloo";
    case DistBackend::kNccl: return "nccl";
  }
  return "auto";
}

DistBackend resolve_dist_backend(DistBackend requested, const c10::Device& device) {
  if (requested == DistBackend::kAuto)
    requested = device.is_cuda() && SATURATE_HAS_NCCL ? DistBackend::kNccl : DistBackend::kGloo;
  if (requested == DistBackend::kNccl) {
    SATURATE_CHECK(SATURATE_HAS_NCCL, "dist: --backend nccl, but this build of saturate has no "
                                      "NCCL backend; use --backend gloo");
    SATURATE_CHECK(device.is_cuda(), "dist: --backend nccl needs a CUDA device, and training "
                                     "runs on ", device.str(), "; use --backend gloo");
  }
  return requested;
}

DistGroup::DistGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DistGroup::~DistGroup() = default;

int DistGroup::rank() const { return impl_->env.rank; }
int DistGroup::world_size() const { return impl_->env.world_size; }
DistBackend DistGroup::backend() const { return impl_->backend; }
std::chrono::milliseconds DistGroup::timeout() const { return impl_->timeout; }

void wait_for(DistGroup::Impl& g, const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    // Gloo reports a dead peer as gloo::IoException (a std::runtime_error), c10d as DistError.
    throw std::runtime_error("dist: rank " + std::to_string(g.env.rank) + " of " +
                             std::to_string(g.env.world_size) + ": " + what + " failed: " +
                             first_line(e.what()));
  }
}

void DistGroup::broadcast(std::vector<at::Tensor>& tensors, int root) {
  c10d::BroadcastOptions o;
  o.rootRank = root;
  wait_for(*impl_, impl_->group->broadcast(tensors, o), "broadcast");
}

void DistGroup::allreduce_sum(std::vector<at::Tensor>& tensors) {
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  wait_for(*impl_, impl_->group->allreduce(tensors, o), "all-reduce");
}

void DistGroup::send(const at::Tensor& tensor, int peer, int tag) {
  SATURATE_ASSERT(tensor.is_contiguous(), "send of a non-contiguous tensor");
  std::vector<at::Tensor> t = {tensor};
  impl_->sends.emplace_back(impl_->group->send(t, peer, tag), tensor);
}

struct DistGroup::PendingRecv::State {
  DistGroup::Impl* group = nullptr;
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor tensor;
};

DistGroup::PendingRecv DistGroup::post_recv(at::Tensor tensor, int peer, int tag) {
  std::vector<at::Tensor> t = {tensor};
  PendingRecv pending;
  pending.state_ = std::make_shared<PendingRecv::State>();
  pending.state_->group = impl_.get();
  pending.state_->work = impl_->group->recv(t, peer, tag);
  pending.state_->tensor = std::move(tensor);
  return pending;
}

at::Tensor DistGroup::PendingRecv::wait() {
  SATURATE_ASSERT(state_ != nullptr, "wait on a receive never posted");
  const std::shared_ptr<State> s = std::move(state_);
  state_.reset();
  wait_for(*s->group, s->work, "receive");
  return s->tensor;
}

void DistGroup::recv(at::Tensor& tensor, int peer, int tag) {
  post_recv(tensor, peer, tag).wait();
}

void DistGroup::wait_sends() {
  // Cleared first: a failed wait must not leave works a later call would wait on again.
  auto sends = std::move(impl_->sends);
  impl_->sends.clear();
  for (auto& [work, tensor] : sends) wait_for(*impl_, work, "send");
}

std::vector<std::vector<double>> DistGroup::allgather(const std::vector<double>& values) {
  const auto n = static_cast<int64_t>(values.size());
  std::vector<at::Tensor> in = {torch::tensor(values, torch::kDouble)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < world_size(); ++r) out[0].push_back(torch::empty({n}, torch::kDouble));
  wait_for(*impl_, impl_->group->allgather(out, in), "all-gather");
  std::vector<std::vector<double>> result;
  for (const at::Tensor& t : out[0]) {
    const double* p = t.data_ptr<double>();
    result.emplace_back(p, p + n);
  }
  return result;
}

std::string DistGroup::exited_peers(std::chrono::milliseconds settle) const {
  const std::string me = pid_machine();
  if (me.empty() || impl_->processes.size() != static_cast<size_t>(world_size())) return "";
  const auto until = std::chrono::steady_clock::now() + settle;
  for (;;) {
    std::string gone;
    int count = 0;
    for (int r = 0; r < world_size(); ++r) {
      if (r == rank()) continue;
      std::istringstream in(impl_->processes[static_cast<size_t>(r)]);
      std::string machine;
      long pid = 0;
      if (!(in >> machine >> pid) || machine != me || !has_exited(pid)) continue;
      gone += (count++ ? ", " : "") + std::to_string(r) + " (pid " + std::to_string(pid) + ")";
    }
    if (count > 0) return (count > 1 ? "ranks " : "rank ") + gone;
    // A peer killed a moment ago closes its sockets before it is gone from /proc.
    if (std::chrono::steady_clock::now() >= until) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::vector<std::string> DistGroup::allgather_bytes(const std::string& bytes) {
  const std::vector<std::vector<double>> sizes = allgather({static_cast<double>(bytes.size())});
  int64_t longest = 0;
  for (const auto& s : sizes) longest = std::max(longest, static_cast<int64_t>(s[0]));
  at::Tensor mine = torch::zeros({std::max<int64_t>(longest, 1)}, torch::kUInt8);
  std::memcpy(mine.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  std::vector<at::Tensor> in = {mine};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < world_size(); ++r) out[0].push_back(torch::empty_like(mine));
  wait_for(*impl_, impl_->group->allgather(out, in), "all-gather");
  std::vector<std::string> result;
  for (int r = 0; r < world_size(); ++r) {
    const auto* p = reinterpret_cast<const char*>(out[0][static_cast<size_t>(r)].data_ptr<uint8_t>());
    result.emplace_back(p, static_cast<size_t>(sizes[static_cast<size_t>(r)][0]));
  }
  return result;
}

void DistGroup::wait_for_rank0(const std::string& what, std::chrono::milliseconds timeout) {
  const std::string key = "rank0-done/" + what;
  if (impl_->env.rank == 0) {
    impl_->store->set(key, std::vector<uint8_t>{1});
    return;
  }
  try {
    impl_->store->wait({key}, timeout);
  } catch (const std::exception& e) {
    SATURATE_CHECK(false, "dist: rank ", impl_->env.rank, " of ", impl_->env.world_size,
                   ": waited ", timeout.count() / 1000, " s for rank 0 (", what, "): ",
                   first_line(e.what()));
  }
}

void DistGroup::barrier() {
  c10d::BarrierOptions o;
  if (impl_->device.is_cuda()) o.device_ids = {impl_->device.has_index() ? impl_->device.index() : 0};
  wait_for(*impl_, impl_->group->barrier(o), "barrier");
}

std::unique_ptr<DistGroup> init_process_group(const DistEnv& env, DistBackend backend,
                                              const c10::Device& device,
                                              std::chrono::milliseconds timeout) {
  SATURATE_CHECK(timeout.count() > 0, "dist: --dist-timeout must be positive");
  auto g = std::make_unique<DistGroup::Impl>();
  g->env = env;
  g->device = device;
  g->timeout = timeout;
  g->backend = resolve_dist_backend(backend, device);
  c10::intrusive_ptr<c10d::Store> base;
  if (!env.is_distributed()) {
    base = c10::make_intrusive<c10d::HashStore>();
  } else {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(env.master_port);
    // torchrun's agent hosts the store when it says so; otherwise rank 0 does.
    o.isServer = !env.agent_store && env.rank == 0;
    o.numWorkers = static_cast<std::size_t>(env.world_size);
    o.waitWorkers = !env.agent_store;
    o.timeout = timeout;
    o.multiTenant = true;
    try {
      base = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
    } catch (const std::exception& e) {
      SATURATE_CHECK(false, "dist: rank ", env.rank, " of ", env.world_size,
                     " could not join the store at ", where(env), " within ",
                     timeout.count() / 1000.0, " s (", first_line(e.what()),
                     "); check MASTER_ADDR/MASTER_PORT and that every rank started, or raise "
                     "--dist-timeout");
    }
  }
  // Keys of one restart attempt never meet another's (torchrun's store outlives attempts).
  g->store = c10::make_intrusive<c10d::PrefixStore>(
      "/worker/attempt_" + std::to_string(env.restart_count) + "/saturate/", base);
  try {
    g->group = make_group(g->store, env.rank, env.world_size, g->backend, device, timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    SATURATE_CHECK(false, "dist: rank ", env.rank, " of ", env.world_size, " could not connect to ",
                   "its peers through the store at ", where(env), " (", first_line(e.what()), ")");
  }
  if (env.is_distributed()) {
    // Who runs where, so that a failed collective can name a peer that has exited.
    try {
      const std::string me = pid_machine() + " " + std::to_string(getpid());
      g->store->set("process/" + std::to_string(env.rank),
                    std::vector<uint8_t>(me.begin(), me.end()));
      for (int r = 0; r < env.world_size; ++r) {
        const std::vector<uint8_t> v = g->store->get("process/" + std::to_string(r));
        g->processes.emplace_back(v.begin(), v.end());
      }
    } catch (const std::exception& e) {
      SATURATE_CHECK(false, "dist: rank ", env.rank, " of ", env.world_size, " lost the store at ",
                     where(env), " while the group formed (", first_line(e.what()), ")");
    }
  }
  return std::make_unique<DistGroup>(std::move(g));
}

std::unique_ptr<DistGroup> DistGroup::subgroup(const std::vector<int>& ranks,
                                               const std::string& name) {
  const Impl& me = *impl_;
  const auto it = std::find(ranks.begin(), ranks.end(), me.env.rank);
  SATURATE_ASSERT(it != ranks.end(), "dist: rank ", me.env.rank, " is not in subgroup ", name);
  auto g = std::make_unique<Impl>();
  g->env = me.env;
  g->env.rank = static_cast<int>(it - ranks.begin());
  g->env.world_size = static_cast<int>(ranks.size());
  g->device = me.device;
  g->timeout = me.timeout;
  g->backend = me.backend;
  g->store = c10::make_intrusive<c10d::PrefixStore>("group/" + name + "/", me.store);
  for (int r : ranks) {
    SATURATE_ASSERT(r >= 0 && r < me.env.world_size, "dist: subgroup ", name, " names rank ", r);
    if (static_cast<size_t>(r) < me.processes.size()) g->processes.push_back(me.processes[r]);
  }
  try {
    g->group = make_group(g->store, g->env.rank, g->env.world_size, g->backend, g->device, g->timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("dist: rank " + std::to_string(me.env.rank) + " could not form group " +
                             name + " (" + first_line(e.what()) + ")");
  }
  return std::make_unique<DistGroup>(std::move(g));
}

}  // namespace saturate
