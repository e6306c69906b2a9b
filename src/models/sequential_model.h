// SPDX-License-Identifier: Apache-2.0
#pragma once
// Built-in models are torch::nn::Sequential stacks; this wraps one behind saturate::Model.

#include <string>
#include <vector>

#include <torch/nn/modules/container/sequential.h>

#include "saturate/models/model.h"

namespace saturate::detail {

class SequentialModel : public Model {
 public:
  SequentialModel(std::string name, torch::nn::Sequential net, int64_t forward_flops_per_sample);
  std::string name() const override { return name_; }
  at::Tensor forward(const at::Tensor& inputs) override;
  std::vector<at::Tensor> parameters() override;
  std::vector<at::Tensor> state_tensors() override;
  /// The Sequential's own names: "1.weight", "4.running_mean", as torch.nn.Sequential's.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() override;
  std::vector<std::pair<std::string, at::Tensor>> named_state() override;
  void train(bool on) override;
  bool is_training() const override;
  void to(const c10::Device& device) override;
  int64_t forward_flops_per_sample() const override { return flops_; }
  /// Groups the children into min(segments, children) contiguous runs of near-equal length;
  /// forward recomputes each run while training with grad mode on.
  bool set_recompute_segments(int64_t segments) override;
  int64_t recompute_segments() const override { return segments_; }
  torch::nn::Sequential& net() { return net_; }
  int64_t pipeline_layers() const override { return static_cast<int64_t>(net_->size()); }
  /// Children [begin, end) in a Sequential of their own, named as in this one ("3.weight").
  std::unique_ptr<Model> pipeline_stage(int64_t begin, int64_t end) override;

 private:
  std::string name_;
  torch::nn::Sequential net_;
  int64_t flops_;
  int64_t segments_ = 0;
  std::vector<size_t> segment_starts_;  ///< first child of each segment, then the child count
};

/// fmnist-cnn: conv(C→32,3x3,pad 1)-ReLU-maxpool2-conv(32→64,3x3,pad 1)-ReLU-maxpool2-flatten-
/// linear(64·H/4·W/4→128)-ReLU-linear(128→classes).
std::unique_ptr<Model> make_fmnist_cnn(const ModelInputs& inputs);
/// mlp: flatten-linear(D→256)-ReLU-linear(256→128)-ReLU-linear(128→classes).
std::unique_ptr<Model> make_mlp(const ModelInputs& inputs);
/// resnet18-cifar: ResNet-18 for small images (3x3 stem conv to 64 channels, no max-pool; stages
/// of 2 BasicBlocks at 64/128/256/512 channels, stride 2 and a 1x1 projection entering stages
/// 2-4; global average pool; linear to classes). Takes [C,H,W] with H, W >= 8.
std::unique_ptr<Model> make_resnet18_cifar(const ModelInputs& inputs);
/// mlp-deep: flatten, 12 x (linear(→512)-ReLU-dropout(0.1)), linear(512→classes). Deep and
/// activation-heavy for its compute: the model for recomputation and memory tests.
std::unique_ptr<Model> make_mlp_deep(const ModelInputs& inputs);
/// A TorchScript module whose forward(x) returns logits.
std::unique_ptr<Model> load_torchscript(const std::string& path, const ModelInputs& inputs);

}  // namespace saturate::detail
