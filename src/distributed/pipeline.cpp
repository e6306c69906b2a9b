// SPDX-License-Identifier: Apache-2.0
#include "saturate/distributed/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <limits>
#include <optional>

#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/core/units.h"
#include "saturate/device/device_memory.h"
#include "saturate/distributed/process_group.h"
#include "saturate/models/model.h"
#include "saturate/telemetry/phase_timer.h"
#include "saturate/train/staged_step.h"
#include "saturate/train/trainer.h"

namespace saturate {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Point-to-point tags: micro-batch m's activation header, its data, its gradient, and its data
// when its shape is not the one the receiver posted for (ActivationSender).
int header_tag(int64_t m) { return static_cast<int>(4 * m); }
int data_tag(int64_t m) { return static_cast<int>(4 * m + 1); }
int grad_tag(int64_t m) { return static_cast<int>(4 * m + 2); }
int reshaped_data_tag(int64_t m) { return static_cast<int>(4 * m + 3); }

constexpr int64_t kMaxDims = 8;

// An activation's shape and type, which travel ahead of its data: the receiving stage does not
// know what its neighbour's layers give.
struct Layout {
  std::vector<int64_t> sizes;
  at::ScalarType type = at::kFloat;
  bool operator==(const Layout& o) const { return sizes == o.sizes && type == o.type; }
  at::Tensor empty(const c10::Device& device) const {
    return torch::empty(sizes, torch::TensorOptions().dtype(type).device(device));
  }
};

Layout layout_of(const at::Tensor& t) { return {t.sizes().vec(), t.scalar_type()}; }

// The header on the tensor's device (NCCL sends only device tensors): dims, type, sizes.
at::Tensor header_of(const at::Tensor& t) {
  SATURATE_CHECK(t.dim() <= kMaxDims, "pipeline: a stage's output has ", t.dim(),
                 " dimensions; at most ", kMaxDims, " can be sent");
  at::Tensor header = torch::zeros({kMaxDims + 2}, torch::kLong);
  auto* h = header.data_ptr<int64_t>();
  h[0] = t.dim();
  h[1] = static_cast<int64_t>(t.scalar_type());
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
  return header.to(t.device());
}

at::Tensor empty_header(const c10::Device& device) {
  return torch::empty({kMaxDims + 2}, torch::TensorOptions().dtype(torch::kLong).device(device));
}

Layout read_header(const at::Tensor& header, int peer) {
  const at::Tensor host = header.cpu();
  const auto* h = host.data_ptr<int64_t>();
  SATURATE_CHECK(h[0] >= 0 && h[0] <= kMaxDims, "pipeline: a corrupt activation header from rank ",
                 peer);
  return {std::vector<int64_t>(h + 2, h + 2 + h[0]), static_cast<at::ScalarType>(h[1])};
}

// Evaluation's plain exchange: the header, then the data received into its shape.
void send_activation(DistGroup& g, const at::Tensor& t, int peer, int64_t m) {
  g.send(header_of(t), peer, header_tag(m));
  g.send(t.detach().contiguous(), peer, data_tag(m));
}

at::Tensor recv_activation(DistGroup& g, int peer, int64_t m, const c10::Device& device) {
  at::Tensor header = empty_header(device);
  g.recv(header, peer, header_tag(m));
  at::Tensor t = read_header(header, peer).empty(device);
  g.recv(t, peer, data_tag(m));
  return t;
}

// A training step's activations, sent. Gloo moves a message only once its receive is posted, so
// the receiving stage posts micro-batch m's data (m >= 1) as soon as it knows m - 1's header,
// taking m - 1's shape for it; the data then arrives while that stage computes, instead of a
// round trip later. A micro-batch of another shape (an uneven split's smaller ones) fills the
// posted receive with a throwaway of the expected shape and goes under reshaped_data_tag.
class ActivationSender {
 public:
  void send(DistGroup& g, const at::Tensor& t, int peer, int64_t m) {
    const at::Tensor data = t.detach().contiguous();
    const Layout now = layout_of(data);
    g.send(header_of(data), peer, header_tag(m));
    if (m == 0 || now == previous_) {
      g.send(data, peer, data_tag(m));
    } else {
      g.send(previous_.empty(data.device()), peer, data_tag(m));
      g.send(data, peer, reshaped_data_tag(m));
    }
    previous_ = now;
  }

 private:
  Layout previous_;
};

// The receiving side of ActivationSender, for one step of `micro` micro-batches.
class ActivationReceiver {
 public:
  ActivationReceiver(DistGroup& g, int peer, int64_t micro, const c10::Device& device)
      : g_(g), peer_(peer), micro_(micro), device_(device) {
    header_ = g_.post_recv(empty_header(device_), peer_, header_tag(0));
  }

  at::Tensor take(int64_t m) {
    const Layout layout = read_header(header_.wait(), peer_);
    DistGroup::PendingRecv data = std::move(data_);
    data_ = {};
    if (m + 1 < micro_) {  // the next one's receives, before this one's data is waited for
      header_ = g_.post_recv(empty_header(device_), peer_, header_tag(m + 1));
      data_ = g_.post_recv(layout.empty(device_), peer_, data_tag(m + 1));
    }
    if (m == 0) return g_.post_recv(layout.empty(device_), peer_, data_tag(0)).wait();
    at::Tensor got = data.wait();
    if (layout_of(got) == layout) return got;
    return g_.post_recv(layout.empty(device_), peer_, reshaped_data_tag(m)).wait();
  }

 private:
  DistGroup& g_;
  int peer_;
  int64_t micro_;
  c10::Device device_;
  DistGroup::PendingRecv header_, data_;
};

// The tags of the tied weights' exchange, above any micro-batch's.
constexpr int kTiedCountTag = 1 << 24, kTiedGradTag = (1 << 24) + 1;

// The first and the last stage's copies of a weight the chain's two ends share
// (Model::pipeline_tied_parameters): each adds the other's gradient, so both copies take the
// same step. The two first agree on how many elements they tie (once, in the first step: it does
// not change): a model tying on one end only would otherwise leave the other waiting.
void sum_tied_gradients(DistGroup& g, Model& stage, int index, int count, const c10::Device& device,
                        bool& agreed) {
  if (count < 2 || (index != 0 && index != count - 1)) return;
  const int peer = index == 0 ? count - 1 : 0;
  std::vector<at::Tensor> tied = stage.pipeline_tied_parameters();
  int64_t n = 0;
  for (const at::Tensor& t : tied) n += t.numel();
  if (!agreed) {
    const auto on = torch::TensorOptions().device(device);
    const at::Tensor mine = torch::full({1}, n, on.dtype(torch::kLong));
    at::Tensor theirs = torch::empty({1}, on.dtype(torch::kLong));
    g.send(mine, peer, kTiedCountTag);
    g.recv(theirs, peer, kTiedCountTag);
    g.wait_sends();
    const int64_t other_n = theirs.cpu().item<int64_t>();
    SATURATE_CHECK(other_n == n, "pipeline: stage ", index, " ties ", n,
                   " parameter elements to stage ", peer, ", which ties ", other_n);
    agreed = true;
  }
  if (n == 0) return;
  std::vector<at::Tensor> pieces;
  for (const at::Tensor& t : tied)
    pieces.push_back(t.grad().defined() ? t.grad().reshape({-1}) : torch::zeros({t.numel()}, t.options()));
  at::Tensor flat = at::cat(pieces);
  at::Tensor other = torch::empty_like(flat);
  g.send(flat, peer, kTiedGradTag);
  g.recv(other, peer, kTiedGradTag);
  g.wait_sends();
  flat.add_(other);  // a + b equals b + a: both ends hold the same sum
  int64_t offset = 0;
  for (at::Tensor& t : tied) {
    const at::Tensor sum = flat.slice(0, offset, offset + t.numel()).view_as(t);
    if (t.grad().defined()) t.mutable_grad().copy_(sum);
    else t.mutable_grad() = sum.clone();
    offset += t.numel();
  }
}

// Where a stage's layers live, so where its activations arrive (the CPU for Gloo, a GPU for
// NCCL): its parameters' device, else the first stage's inputs', else the CPU.
c10::Device stage_device(Model& stage, bool first, const at::Tensor& inputs) {
  const std::vector<at::Tensor> params = stage.parameters();
  if (!params.empty()) return params.front().device();
  return first ? inputs.device() : c10::Device(c10::kCPU);
}

// One micro-batch in flight on this stage: its input (whose gradient goes back) and its output
// (or, on the last stage, its weighted loss).
struct Held {
  int64_t m = 0;
  at::Tensor input, output;
};

// One step on one stage: its micro-batches' forwards and backwards, in the schedule's order.
class StepRun {
 public:
  StepRun(DistGroup& g, Model& stage, int index, int count, int64_t micro, const at::Tensor& inputs,
          const at::Tensor& targets, PhaseTimer* timer, const at::Tensor& loss_scale)
      : g_(g), stage_(stage), index_(index), micro_(micro), first_(index == 0),
        last_(index == count - 1), timer_(timer), loss_scale_(loss_scale) {
    const at::Tensor& split_by = first_ ? inputs : targets;
    if (first_ || last_) {
      SATURATE_CHECK(split_by.defined() && micro <= split_by.size(0), "--micro-batches ", micro,
                     " is more than the batch of ", split_by.defined() ? split_by.size(0) : 0);
    }
    if (first_) xs_ = inputs.tensor_split(micro);
    if (last_) ys_ = targets.tensor_split(micro);
    batch_ = last_ ? static_cast<double>(targets.size(0)) : 0;
    device_ = stage_device(stage, first_, inputs);
    if (!first_) activations_.emplace(g, index - 1, micro, device_);
  }

  int64_t forwards_done() const { return next_forward_; }
  int64_t backwards_done() const { return next_backward_; }
  PipelineStepStats& stats() { return stats_; }
  /// The batch's loss on the last stage (a double on the CPU), 0 elsewhere.
  at::Tensor loss_sum() const {
    return last_ ? loss_sum_.reshape({1})
                 : torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  }

  void forward() {
    Held h;
    h.m = next_forward_++;
    Clock::time_point t0 = Clock::now();
    if (first_) {
      h.input = xs_[h.m];
    } else {
      h.input = activations_->take(h.m);
      stats_.wait_ms += ms_since(t0);
      mark(Phase::kCommunication);
      t0 = Clock::now();
      if (h.input.is_floating_point()) h.input.requires_grad_(true);
    }
    at::Tensor out = stage_.forward(h.input);
    if (last_) {
      const double share = static_cast<double>(ys_[h.m].size(0)) / batch_;
      h.output = mean_loss(out, ys_[h.m]) * share;
      // Kept on the device: no synchronisation per micro-batch.
      loss_sum_ = h.m == 0 ? h.output.detach().to(torch::kDouble) : loss_sum_ + h.output.detach().to(torch::kDouble);
    } else {
      h.output = out;
    }
    stats_.compute_ms += ms_since(t0);
    mark(Phase::kForward);
    if (!last_) {
      sender_.send(g_, out, index_ + 1, h.m);
      mark(Phase::kCommunication);
    }
    held_.push_back(std::move(h));
    post_next_gradient();
    stats_.most_held = std::max<int64_t>(stats_.most_held, static_cast<int64_t>(held_.size()));
  }

  void backward() {
    Held h = std::move(held_.front());
    held_.pop_front();
    SATURATE_ASSERT(h.m == next_backward_, "pipeline: backward out of order");
    ++next_backward_;
    Clock::time_point t0 = Clock::now();
    if (last_) {
      (loss_scale_.defined() ? h.output * loss_scale_ : h.output).backward();
    } else {
      // Posted when h became the oldest held (after its forward, or the previous backward).
      SATURATE_ASSERT(grad_for_ == h.m, "pipeline: a gradient posted for another micro-batch");
      const at::Tensor grad = grad_.wait();
      stats_.wait_ms += ms_since(t0);
      mark(Phase::kCommunication);
      t0 = Clock::now();
      // A stage whose output needs no gradient (no parameters before it) has nothing to do.
      if (h.output.requires_grad()) h.output.backward(grad);
    }
    stats_.compute_ms += ms_since(t0);
    mark(Phase::kBackward);
    if (!first_) {
      at::Tensor grad = h.input.grad();
      if (!grad.defined()) grad = torch::zeros_like(h.input);
      g_.send(grad.contiguous(), index_ - 1, grad_tag(h.m));
      mark(Phase::kCommunication);
    }
    post_next_gradient();
  }

 private:
  // The gradient of the oldest held micro-batch's output, posted as soon as that output exists
  // (one output-sized buffer ahead), so it moves when the next stage sends it.
  void post_next_gradient() {
    if (last_ || held_.empty() || grad_for_ == held_.front().m) return;
    grad_for_ = held_.front().m;
    grad_ = g_.post_recv(torch::empty_like(held_.front().output), index_ + 1, grad_tag(grad_for_));
  }

  void mark(Phase phase) {
    if (timer_ != nullptr) timer_->mark(phase);
  }

  DistGroup& g_;
  Model& stage_;
  int index_;
  int64_t micro_;
  bool first_, last_;
  PhaseTimer* timer_;
  at::Tensor loss_scale_;
  std::vector<at::Tensor> xs_, ys_;
  double batch_ = 0;
  c10::Device device_{c10::kCPU};
  PipelineStepStats stats_;
  std::deque<Held> held_;
  at::Tensor loss_sum_;
  int64_t next_forward_ = 0, next_backward_ = 0;
  std::optional<ActivationReceiver> activations_;
  ActivationSender sender_;
  DistGroup::PendingRecv grad_;
  int64_t grad_for_ = -1;
};

}  // namespace

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::kGPipe;
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  SATURATE_CHECK(false, "--pipeline-schedule: '", name, "' is not a pipeline schedule (gpipe, 1f1b)");
  return PipelineSchedule::kGPipe;
}

std::string to_string(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kGPipe ? "gpipe" : "1f1b";
}

std::vector<std::pair<int64_t, int64_t>> split_layers_evenly(int64_t layers, int stages) {
  SATURATE_CHECK(layers > 0, "--pipeline-stages: the model cannot be split into stages by layers");
  SATURATE_CHECK(stages >= 1, "--pipeline-stages must be at least 1, got ", stages);
  SATURATE_CHECK(stages <= layers, "--pipeline-stages ", stages, ": the model has only ", layers,
                 " layers to split");
  std::vector<std::pair<int64_t, int64_t>> spans;
  int64_t begin = 0;
  for (int s = 0; s < stages; ++s) {
    const int64_t n = layers / stages + (s < layers % stages ? 1 : 0);
    spans.emplace_back(begin, begin + n);
    begin += n;
  }
  return spans;
}

std::vector<int64_t> parse_pipeline_split(const std::string& split, int stages,
                                          const std::string& what) {
  if (split == "balanced" || split == "even") return {};
  std::vector<int64_t> counts;
  size_t at = 0;
  while (at <= split.size() && counts.size() <= static_cast<size_t>(std::max(stages, 0))) {
    const size_t comma = std::min(split.find(',', at), split.size());
    const std::string item = split.substr(at, comma - at);
    char* end = nullptr;
    const long long n = std::strtoll(item.c_str(), &end, 10);
    SATURATE_CHECK(!item.empty() && *end == '\0' && n >= 1 && n <= 1000000, what, ": '", split,
                   "' is not a split (balanced, even, or each stage's layer count: 2,3,3)");
    counts.push_back(n);
    at = comma + 1;
  }
  SATURATE_CHECK(static_cast<int>(counts.size()) == stages, what, ": '", split, "' gives ",
                 counts.size() > static_cast<size_t>(stages) ? "more" : std::to_string(counts.size()),
                 " stages' layer counts for ", stages, " stages");
  return counts;
}

std::vector<std::pair<int64_t, int64_t>> spans_of_layer_counts(const std::vector<int64_t>& counts,
                                                               int64_t layers) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  int64_t begin = 0;
  for (int64_t n : counts) {
    spans.emplace_back(begin, begin + n);
    begin += n;
  }
  SATURATE_CHECK(begin == layers, "--pipeline-split: the stages' layer counts add up to ", begin,
                 "; the model has ", layers, " layers");
  return spans;
}

std::vector<LayerCost> profile_layers(Model& model, const at::Tensor& inputs, int repeats,
                                      DeviceMemory* memory) {
  const int64_t n = model.pipeline_layers();
  SATURATE_CHECK(n > 0, "pipeline: model ", model.name(), " cannot be split into stages by layers");
  SATURATE_CHECK(repeats >= 1, "pipeline: profile repeats must be at least 1");
  std::vector<LayerCost> costs;
  at::Tensor x = inputs;
  for (int64_t i = 0; i < n; ++i) {
    auto layer = model.pipeline_stage(i, i + 1);
    LayerCost c;
    for (const at::Tensor& p : layer->parameters()) c.param_bytes += p.numel() * p.element_size();
    std::vector<double> ms;
    at::Tensor out;
    int64_t held = -1;
    for (int r = 0; r <= repeats; ++r) {  // the first is a warm-up
      const at::Tensor in = x.is_floating_point() ? x.detach().requires_grad_(true) : x;
      out = at::Tensor();
      const int64_t before = memory != nullptr ? memory->snapshot().live_bytes : 0;
      const Clock::time_point t0 = Clock::now();
      out = layer->forward(in);
      if (r == 0 && memory != nullptr) held = memory->snapshot().live_bytes - before;
      if (out.requires_grad()) out.backward(torch::ones_like(out));
      if (r > 0) ms.push_back(ms_since(t0));
    }
    for (const at::Tensor& p : layer->parameters()) p.mutable_grad() = at::Tensor();
    std::sort(ms.begin(), ms.end());
    c.ms = ms[ms.size() / 2];
    c.activation_bytes = std::max<int64_t>(held, out.numel() * out.element_size());
    costs.push_back(c);
    x = out.detach();
  }
  return costs;
}

StageSplit split_layers_balanced(const std::vector<LayerCost>& layers, int stages,
                                 int64_t memory_limit_bytes, double param_scale) {
  const auto n = static_cast<int64_t>(layers.size());
  split_layers_evenly(n, stages);  // the same bad inputs
  std::vector<double> t(n + 1, 0), m(n + 1, 0);  // prefix sums of time and memory
  for (int64_t i = 0; i < n; ++i) {
    t[i + 1] = t[i] + layers[i].ms;
    m[i + 1] = m[i] + static_cast<double>(layers[i].param_bytes) * param_scale +
               static_cast<double>(layers[i].activation_bytes);
  }
  auto fits = [&](int64_t a, int64_t b) {
    return memory_limit_bytes <= 0 || m[b] - m[a] <= static_cast<double>(memory_limit_bytes);
  };
  // best[s][i]: the least slowest-stage time splitting the first i layers into s stages.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> cut(stages + 1, std::vector<int64_t>(n + 1, -1));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int64_t i = s; i <= n; ++i)
      for (int64_t j = s - 1; j < i; ++j) {
        if (!std::isfinite(best[s - 1][j]) || !fits(j, i)) continue;
        const double v = std::max(best[s - 1][j], t[i] - t[j]);
        if (v < best[s][i]) {
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
  double largest = 0;
  for (int64_t i = 0; i < n; ++i) largest = std::max(largest, m[i + 1] - m[i]);
  SATURATE_CHECK(std::isfinite(best[stages][n]), "--memory-limit ",
                 format_bytes(memory_limit_bytes), ": no split of the model's ", n,
                 " layers into ", stages, " stages fits it (its layers' weights, gradients, "
                 "optimizer state and outputs at the batch come to ",
                 format_bytes(static_cast<int64_t>(m[n])), ", the largest layer's to ",
                 format_bytes(static_cast<int64_t>(largest)), "): more stages, a smaller batch or "
                 "a higher limit");
  StageSplit split;
  split.slowest_ms = best[stages][n];
  for (int64_t s = stages, i = n; s > 0; i = cut[s][i], --s) split.spans.emplace_back(cut[s][i], i);
  std::reverse(split.spans.begin(), split.spans.end());
  for (const auto& [a, b] : split.spans) {
    split.ms.push_back(t[b] - t[a]);
    split.bytes.push_back(static_cast<int64_t>(m[b] - m[a]));
  }
  return split;
}

PipelineStage::PipelineStage(DistGroup& group, Model& stage, PipelineOptions options)
    : group_(group), stage_(stage), options_(options), index_(group.rank()),
      count_(group.world_size()) {
  SATURATE_CHECK(options_.micro_batches >= 1, "--micro-batches must be at least 1, got ",
                 options_.micro_batches);
}

PipelineStepStats PipelineStage::forward_backward(const at::Tensor& inputs,
                                                  const at::Tensor& targets, PhaseTimer* timer,
                                                  const at::Tensor& loss_scale) {
  // An epoch's last batch may be smaller than M: then one micro-batch a sample. Every stage is
  // given the batch, so each comes to the same count.
  const at::Tensor& batch = inputs.defined() ? inputs : targets;
  const int64_t micro = batch.defined() ? std::min(options_.micro_batches, batch.size(0))
                                        : options_.micro_batches;
  StepRun run(group_, stage_, index_, count_, micro, inputs, targets, timer, loss_scale);
  if (options_.schedule == PipelineSchedule::kGPipe) {
    while (run.forwards_done() < micro) run.forward();
  } else {
    const int64_t warm_up = std::min<int64_t>(count_ - 1 - index_, micro);
    while (run.forwards_done() < warm_up) run.forward();
    while (run.forwards_done() < micro) {
      run.forward();
      run.backward();
    }
  }
  while (run.backwards_done() < micro) run.backward();
  PipelineStepStats stats = run.stats();
  const Clock::time_point t0 = Clock::now();
  sum_tied_gradients(group_, stage_, index_, count_, stage_device(stage_, index_ == 0, inputs),
                     tied_agreed_);
  group_.wait_sends();
  std::vector<at::Tensor> loss = {run.loss_sum()};
  group_.broadcast(loss, count_ - 1);
  stats.wait_ms += ms_since(t0);
  stats.loss = loss[0].cpu().item<double>();
  if (timer != nullptr) timer->mark(Phase::kCommunication);
  return stats;
}

EvalSums PipelineStage::evaluate(const at::Tensor& inputs, const at::Tensor& targets) {
  const int64_t micro = options_.micro_batches;
  const bool first = index_ == 0, last = index_ == count_ - 1;
  const at::Tensor& split_by = first ? inputs : targets;
  if (first || last) {
    SATURATE_CHECK(split_by.defined() && split_by.size(0) > 0, "pipeline: an empty evaluation batch");
  }
  const c10::Device device = stage_device(stage_, first, inputs);
  const auto on_device = [&](at::ScalarType t) { return torch::TensorOptions().dtype(t).device(device); };
  // Fewer micro-batches than M when the batch is smaller (a split's last batch); every stage
  // learns the count from the first stage's split.
  std::vector<at::Tensor> count = {
      torch::full({1}, first ? std::min(micro, inputs.size(0)) : 0, on_device(torch::kLong))};
  group_.broadcast(count, 0);
  const int64_t pieces = count[0].item<int64_t>();
  const std::vector<at::Tensor> xs = first ? inputs.tensor_split(pieces) : std::vector<at::Tensor>();
  const std::vector<at::Tensor> ys = last ? targets.tensor_split(pieces) : std::vector<at::Tensor>();
  EvalSums sums;
  {
    c10::InferenceMode inference;
    for (int64_t m = 0; m < pieces; ++m) {
      const at::Tensor in = first ? xs[m] : recv_activation(group_, index_ - 1, m, device);
      const at::Tensor out = stage_.forward(in);
      if (!last) {
        send_activation(group_, out, index_ + 1, m);
        continue;
      }
      sums += eval_sums(out, ys[m]);
    }
  }
  group_.wait_sends();
  std::vector<at::Tensor> all = {torch::tensor({sums.loss_sum, static_cast<double>(sums.correct),
                                                static_cast<double>(sums.units),
                                                sums.per_token ? 1.0 : 0.0},
                                               on_device(torch::kDouble))};
  group_.broadcast(all, count_ - 1);
  const at::Tensor got = all[0].cpu();
  const double* v = got.data_ptr<double>();
  return {v[0], static_cast<int64_t>(std::llround(v[1])), static_cast<int64_t>(std::llround(v[2])),
          v[3] > 0.5};
}

namespace {

// PipelineStage behind the trainer's seam (train/staged_step.h), optionally one of several
// replicas of the pipeline (data parallel): after each step's pipeline flush, this stage's
// gradients are averaged with the same stage's on every replica, in one all-reduce.
class PipelineStagedStep final : public StagedStep {
 public:
  PipelineStagedStep(DistGroup& stages, Model& stage, PipelineOptions options, DistGroup* replicas)
      : stages_(stages), stage_(stage), replicas_(replicas), pipe_(stages, stage, options) {
    if (replicas_ == nullptr || replicas_->world_size() < 2) {
      replicas_ = nullptr;
      return;
    }
    // Replica 0's weights on every replica, as data parallelism starts.
    std::vector<at::Tensor> params = stage_.parameters();
    torch::NoGradGuard no_grad;
    through_one_buffer(params, [&](std::vector<at::Tensor>& flat) { replicas_->broadcast(flat, 0); });
  }

  at::Tensor forward_backward(const at::Tensor& x, const at::Tensor& y, StepRecord& r,
                              PhaseTimer* timer, const at::Tensor& loss_scale) override {
    (void)r;  // the waits are on the timer, as kCommunication
    const PipelineStepStats stats = pipe_.forward_backward(x, y, timer, loss_scale);
    at::Tensor loss = torch::full({1}, stats.loss, torch::TensorOptions().dtype(torch::kDouble).device(x.device()));
    if (replicas_ != nullptr) {
      average_gradients();
      std::vector<at::Tensor> v = {loss};
      replicas_->allreduce_sum(v);
      loss = v[0] / replicas_->world_size();
      if (timer != nullptr) timer->mark(Phase::kCommunication);
    }
    return loss.reshape({}).to(torch::kFloat);
  }
  EvalSums evaluate(const at::Tensor& x, const at::Tensor& y) override {
    return pipe_.evaluate(x, y);
  }
  at::Tensor sum_across_stages(const at::Tensor& value) override {
    std::vector<at::Tensor> v = {value.reshape({1}).clone()};
    stages_.allreduce_sum(v);
    return v[0].reshape({});
  }
  int stage() const override { return stages_.rank(); }
  int stages() const override { return stages_.world_size(); }
  std::vector<at::Tensor> counted_by_another_stage() override {
    if (stages_.world_size() < 2 || stages_.rank() != stages_.world_size() - 1) return {};
    return stage_.pipeline_tied_parameters();  // the first stage counts the tied weights
  }

 private:
  // One flat buffer of this stage's gradients, summed across the replicas and divided by them.
  void average_gradients() {
    std::vector<at::Tensor> grads;
    for (const at::Tensor& p : stage_.parameters())
      if (p.grad().defined()) grads.push_back(p.grad());
    const double n = replicas_->world_size();
    through_one_buffer(grads, [&](std::vector<at::Tensor>& flat) {
      replicas_->allreduce_sum(flat);
      flat[0].div_(n);
    });
  }
  // `op` on one flat copy of `ts` (a collective of one tensor, where Gloo takes a list only of
  // equal shapes), copied back into them; nothing for none.
  template <typename Op>
  static void through_one_buffer(std::vector<at::Tensor>& ts, const Op& op) {
    if (ts.empty()) return;
    std::vector<at::Tensor> pieces;
    for (const at::Tensor& t : ts) pieces.push_back(t.reshape({-1}));
    std::vector<at::Tensor> flat = {at::cat(pieces)};
    op(flat);
    int64_t offset = 0;
    for (at::Tensor& t : ts) {
      t.copy_(flat[0].slice(0, offset, offset + t.numel()).view_as(t));
      offset += t.numel();
    }
  }

  DistGroup& stages_;
  Model& stage_;
  DistGroup* replicas_;
  PipelineStage pipe_;
};

}  // namespace

std::unique_ptr<StagedStep> make_pipeline_step(DistGroup& group, Model& stage,
                                               PipelineOptions options, DistGroup* replicas) {
  return std::make_unique<PipelineStagedStep>(group, stage, options, replicas);
}

}  // namespace saturate
