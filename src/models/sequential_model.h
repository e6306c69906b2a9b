// SPDX-License-Identifier: Apache-2.0
#pragma once
// Built-in models are torch::nn::Sequential stacks; this wraps one behind saturate::Model.

#include <string>

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
  void train(bool on) override;
  bool is_training() const override;
  void to(const c10::Device& device) override;
  int64_t forward_flops_per_sample() const override { return flops_; }
  torch::nn::Sequential& net() { return net_; }

 private:
  std::string name_;
  torch::nn::Sequential net_;
  int64_t flops_;
};

/// fmnist-cnn: conv(C→32,3x3,pad 1)-ReLU-maxpool2-conv(32→64,3x3,pad 1)-ReLU-maxpool2-flatten-
/// linear(64·H/4·W/4→128)-ReLU-linear(128→classes).
std::unique_ptr<Model> make_fmnist_cnn(const ModelInputs& inputs);
/// mlp: flatten-linear(D→256)-ReLU-linear(256→128)-ReLU-linear(128→classes).
std::unique_ptr<Model> make_mlp(const ModelInputs& inputs);
/// A TorchScript module whose forward(x) returns logits.
std::unique_ptr<Model> load_torchscript(const std::string& path, const ModelInputs& inputs);

}  // namespace saturate::detail
