// SPDX-License-Identifier: Apache-2.0
#include "models/sequential_model.h"

#include <algorithm>

#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/models/recompute.h"
#include "saturate/models/sequential.h"

namespace saturate::detail {
namespace nn = torch::nn;

SequentialModel::SequentialModel(std::string name, nn::Sequential net,
                                 int64_t forward_flops_per_sample)
    : name_(std::move(name)), net_(std::move(net)), flops_(forward_flops_per_sample) {}

at::Tensor SequentialModel::forward(const at::Tensor& inputs) {
  if (segments_ == 0 || !net_->is_training() || !at::GradMode::is_enabled())
    return net_->forward(inputs);
  at::Tensor x = inputs;
  for (size_t s = 0; s + 1 < segment_starts_.size(); ++s) {
    const size_t first = segment_starts_[s], last = segment_starts_[s + 1];
    // The shared_ptr keeps the modules alive for as long as the graph holds the segment.
    x = recompute(
        [net = net_.ptr(), first, last](const at::Tensor& in) {
          at::Tensor h = in;
          for (auto it = net->begin() + first; it != net->begin() + last; ++it) h = it->forward(h);
          return h;
        },
        x);
  }
  return x;
}

bool SequentialModel::set_recompute_segments(int64_t segments) {
  SATURATE_CHECK(segments >= 0, "model: recompute segments must be >= 0 (0 turns it off), got ",
                 segments);
  const auto children = static_cast<int64_t>(net_->size());
  segments_ = std::min(segments, children);
  segment_starts_.clear();
  for (int64_t s = 0; segments_ > 0 && s <= segments_; ++s)
    segment_starts_.push_back(static_cast<size_t>(s * children / segments_));
  return true;
}

std::vector<at::Tensor> SequentialModel::parameters() { return net_->parameters(); }

std::vector<at::Tensor> SequentialModel::state_tensors() {
  std::vector<at::Tensor> out = net_->parameters();
  for (auto& b : net_->buffers()) out.push_back(b);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> SequentialModel::named_parameters() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : net_->named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> SequentialModel::named_state() {
  std::vector<std::pair<std::string, at::Tensor>> out = named_parameters();
  for (const auto& b : net_->named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

std::unique_ptr<Model> SequentialModel::pipeline_stage(int64_t begin, int64_t end) {
  const auto n = static_cast<int64_t>(net_->size());
  SATURATE_CHECK(0 <= begin && begin < end && end <= n, "model: ", name_, " has ", n,
                 " layers; a pipeline stage of layers [", begin, ", ", end, ") is not among them");
  nn::Sequential part;
  for (int64_t i = begin; i < end; ++i)
    part->push_back(std::to_string(i), *(net_->begin() + i));
  auto stage = std::make_unique<SequentialModel>(
      name_ + "[" + std::to_string(begin) + ":" + std::to_string(end) + "]", part, 0);
  stage->train(net_->is_training());
  return stage;
}

void SequentialModel::train(bool on) { net_->train(on); }
bool SequentialModel::is_training() const { return net_->is_training(); }
void SequentialModel::to(const c10::Device& device) { net_->to(device); }

std::unique_ptr<Model> make_fmnist_cnn(const ModelInputs& in) {
  SATURATE_CHECK(in.sample_shape.size() == 3, "model: fmnist-cnn takes images [C,H,W], got ",
                 in.sample_shape.size(), "-d samples; use --model mlp for vectors");
  const int64_t c = in.sample_shape[0], h = in.sample_shape[1], w = in.sample_shape[2];
  SATURATE_CHECK(h >= 4 && w >= 4, "model: fmnist-cnn needs images of at least 4x4, got ", h, "x",
                 w);
  const int64_t h2 = h / 2, w2 = w / 2, h4 = h2 / 2, w4 = w2 / 2;
  nn::Sequential net(
      nn::Conv2d(nn::Conv2dOptions(c, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
      nn::Flatten(), nn::Linear(64 * h4 * w4, 128), nn::ReLU(), nn::Linear(128, in.num_classes));
  // Multiply-adds count as 2 FLOPs; ReLU and pooling are negligible next to these.
  const int64_t flops = 2 * (c * 9 * 32 * h * w) + 2 * (32 * 9 * 64 * h2 * w2) +
                        2 * (64 * h4 * w4 * 128) + 2 * (128 * in.num_classes);
  return std::make_unique<SequentialModel>("fmnist-cnn", std::move(net), flops);
}

std::unique_ptr<Model> make_mlp(const ModelInputs& in) {
  SATURATE_CHECK(!in.sample_shape.empty(), "model: mlp needs a sample shape");
  int64_t d = 1;
  for (int64_t s : in.sample_shape) d *= s;
  nn::Sequential net(nn::Flatten(), nn::Linear(d, 256), nn::ReLU(), nn::Linear(256, 128),
                     nn::ReLU(), nn::Linear(128, in.num_classes));
  const int64_t flops = 2 * (d * 256 + 256 * 128 + 128 * in.num_classes);
  return std::make_unique<SequentialModel>("mlp", std::move(net), flops);
}

std::unique_ptr<Model> make_mlp_deep(const ModelInputs& in) {
  SATURATE_CHECK(!in.sample_shape.empty(), "model: mlp-deep needs a sample shape");
  constexpr int64_t kWidth = 512, kBlocks = 12;
  int64_t d = 1;
  for (int64_t s : in.sample_shape) d *= s;
  nn::Sequential net;
  net->push_back(nn::Flatten());
  for (int64_t b = 0; b < kBlocks; ++b) {
    net->push_back(nn::Linear(b == 0 ? d : kWidth, kWidth));
    net->push_back(nn::ReLU());
    net->push_back(nn::Dropout(0.1));
  }
  net->push_back(nn::Linear(kWidth, in.num_classes));
  const int64_t flops =
      2 * (d * kWidth + (kBlocks - 1) * kWidth * kWidth + kWidth * in.num_classes);
  return std::make_unique<SequentialModel>("mlp-deep", std::move(net), flops);
}

}  // namespace saturate::detail

namespace saturate {

std::unique_ptr<Model> make_sequential_model(const std::string& name, torch::nn::Sequential net,
                                             int64_t forward_flops_per_sample) {
  return std::make_unique<detail::SequentialModel>(name, std::move(net), forward_flops_per_sample);
}

}  // namespace saturate
