// SPDX-License-Identifier: Apache-2.0
#include "saturate/distributed/data_parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <torch/torch.h>

#include "distributed/process_group_impl.h"
#include "saturate/core/error.h"
#include "saturate/models/model.h"

namespace saturate {
namespace {

// Broadcasts from rank 0 in one coalesced buffer per ~250 MiB, as DDP does at construction.
constexpr size_t kBroadcastBufferBytes = size_t{250} << 20;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// When the buckets of one backward were handed over and when their all-reduces completed:
// the last hand-over is when backward's compute ended (every gradient was ready), so what
// completes after it is communication that did not overlap compute.
struct CommClock {
  std::atomic<int64_t> last_launch_ns{0};
  std::atomic<int64_t> last_done_ns{0};
};

// The squared norms of this rank's buckets before averaging (the noise scale's small batch),
// kept on the device; the hooks run on autograd's threads.
struct LocalNorms {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::vector<at::Tensor> sqr;
};

// DDP's all-reduce hook (average: divide, then sum), timed.
class TimedAllReduce final : public c10d::CommHookInterface {
 public:
  TimedAllReduce(c10::intrusive_ptr<c10d::ProcessGroup> group, std::shared_ptr<CommClock> clock,
                 std::shared_ptr<LocalNorms> norms)
      : group_(std::move(group)), clock_(std::move(clock)), norms_(std::move(norms)) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    clock_->last_launch_ns.store(now_ns());
    std::vector<at::Tensor> tensors = {bucket.getBufferRef()};
    if (norms_->on.load()) {
      at::Tensor sqr = at::linalg_vector_norm(tensors[0], 2, at::OptionalIntArrayRef{}, false, at::kFloat)
                           .to(at::kDouble)
                           .square();
      std::lock_guard<std::mutex> lock(norms_->mutex);
      norms_->sqr.push_back(std::move(sqr));
    }
    tensors[0].div_(group_->getSize());  // before the sum: no overflow in half precision
    auto done = group_->allreduce(tensors)->getFuture();
    std::shared_ptr<CommClock> clock = clock_;
    return done->then(
        [clock](c10::ivalue::Future& f) {
          const int64_t t = now_ns();
          int64_t seen = clock->last_done_ns.load();
          while (seen < t && !clock->last_done_ns.compare_exchange_weak(seen, t)) {
          }
          return f.value();
        },
        done->elementType());
  }

  at::Tensor parseHookResult(const c10::IValue& result) override {
    return c10d::detail::parseCppCommHookResult(result);
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::shared_ptr<CommClock> clock_;
  std::shared_ptr<LocalNorms> norms_;
};

class ReducerSync final : public GradientSync {
 public:
  ReducerSync(DistGroup& group, const DataParallelOptions& o) : group_(group), o_(o) {}

  void attach(Model& model) override {
    SATURATE_CHECK(reducer_ == nullptr, "dist: a data-parallel sync serves one model");
    DistGroup::Impl& g = group_.impl();
    torch::NoGradGuard no_grad;
    params_ = model.parameters();
    // Buffers: the model's state that is not a parameter (BatchNorm running statistics).
    std::unordered_set<const void*> param_impls;
    for (const at::Tensor& p : params_) param_impls.insert(p.unsafeGetTensorImpl());
    for (const at::Tensor& t : model.state_tensors())
      if (!param_impls.count(t.unsafeGetTensorImpl()) && t.numel() > 0) buffers_.push_back(t);
    // Every rank must hold the same shapes in the same order, or the buckets would not match:
    // c10d checks it collectively and names the first mismatch.
    c10d::verify_params_across_processes(g.group, params_, std::nullopt);
    std::vector<at::Tensor> state = params_;
    state.insert(state.end(), buffers_.begin(), buffers_.end());
    c10d::broadcast_coalesced(g.group, state, kBroadcastBufferBytes, 0);
    if (group_.world_size() == 1 && !o_.reduce_alone) return;
    std::vector<size_t> limits = {static_cast<size_t>(o_.first_bucket_bytes),
                                  static_cast<size_t>(o_.bucket_bytes)};
    std::vector<std::vector<size_t>> buckets =
        std::get<0>(c10d::compute_bucket_assignment_by_size(params_, limits));
    // Gradients arrive roughly in reverse order of the parameters: so do the buckets.
    std::reverse(buckets.begin(), buckets.end());
    reducer_ = std::make_shared<c10d::Reducer>(
        params_, std::move(buckets), g.group, std::vector<bool>(params_.size(), false),
        o_.bucket_bytes, /*find_unused_parameters=*/false, /*gradient_as_bucket_view=*/false,
        std::unordered_map<size_t, std::string>{}, o_.first_bucket_bytes,
        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
        std::vector<int64_t>{});
    reducer_->register_comm_hook(std::make_unique<TimedAllReduce>(g.group, clock_, norms_));
  }

  void before_forward(bool sync) override {
    if (!reducer_) return;
    // Collective on every rank at the same point: the buckets are rebuilt once, in the order
    // the first backward produced gradients.
    reducer_->rebuild_buckets();
    if (sync) reducer_->prepare_for_forward();
    if (o_.broadcast_buffers && !buffers_.empty()) {
      torch::NoGradGuard no_grad;
      c10d::broadcast_coalesced(group_.impl().group, buffers_, kBroadcastBufferBytes, 0);
    }
  }

  void before_evaluate() override {
    if (!reducer_ || buffers_.empty()) return;
    torch::NoGradGuard no_grad;
    c10d::broadcast_coalesced(group_.impl().group, buffers_, kBroadcastBufferBytes, 0);
  }

  void before_backward(bool sync) override {
    // Without prepare_for_backward the Reducer's hooks stand aside: gradients accumulate.
    if (reducer_ && sync) reducer_->prepare_for_backward({});
  }

  int world_size() const override { return group_.world_size(); }
  int rank() const override { return group_.rank(); }

  void sum_across_ranks(std::vector<double>& values) override {
    if (group_.world_size() == 1 || values.empty()) return;
    std::vector<at::Tensor> t = {torch::tensor(values, torch::kDouble)};
    group_.allreduce_sum(t);  // on the CPU backend, whatever the training device
    const double* p = t[0].data_ptr<double>();
    values.assign(p, p + values.size());
  }

  double take_wait_ms() override {
    const int64_t launch = clock_->last_launch_ns.exchange(0);
    const int64_t done = clock_->last_done_ns.exchange(0);
    return launch > 0 && done > launch ? static_cast<double>(done - launch) / 1e6 : 0.0;
  }

  void measure_local_grad_sqr(bool on) override { norms_->on.store(on); }

  at::Tensor take_local_grad_sqr() override {
    if (!norms_->on.load() || !reducer_) return at::Tensor();
    std::lock_guard<std::mutex> lock(norms_->mutex);
    // Called by every rank once per synchronised backward, whatever its buckets did: the
    // collective below must match on all of them.
    std::vector<at::Tensor> total = {norms_->sqr.empty()
                                         ? at::zeros({}, params_.front().options().dtype(at::kDouble))
                                         : at::stack(norms_->sqr).sum()};
    norms_->sqr.clear();
    // The mean over the ranks (each one's own gradient is a small batch): one more all-reduce of
    // one number per step, and a variance lower by the world size.
    group_.impl().group->allreduce(total)->wait();
    return total[0] / group_.world_size();
  }

 private:
  DistGroup& group_;
  DataParallelOptions o_;
  std::vector<at::Tensor> params_, buffers_;
  std::shared_ptr<c10d::Reducer> reducer_;
  std::shared_ptr<CommClock> clock_ = std::make_shared<CommClock>();
  std::shared_ptr<LocalNorms> norms_ = std::make_shared<LocalNorms>();
};

}  // namespace

std::unique_ptr<GradientSync> make_data_parallel(DistGroup& group,
                                                 const DataParallelOptions& options) {
  SATURATE_CHECK(options.bucket_bytes > 0 && options.first_bucket_bytes > 0,
                 "dist: bucket sizes must be positive");
  return std::make_unique<ReducerSync>(group, options);
}

}  // namespace saturate
