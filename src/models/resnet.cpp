// SPDX-License-Identifier: Apache-2.0
// resnet18-cifar: the CIFAR variant of ResNet-18 (He et al. 2016; the layout popularised by
// kuangliu/pytorch-cifar). Each BasicBlock is one child of the Sequential, so recompute
// segments (SequentialModel::set_recompute_segments) fall on block boundaries.
#include <torch/torch.h>

#include "models/sequential_model.h"
#include "saturate/core/error.h"

namespace saturate::detail {
namespace {
namespace nn = torch::nn;

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// Output side of a 3x3/pad-1 or 1x1/pad-0 convolution with this stride.
int64_t conv_out(int64_t size, int64_t stride) { return (size - 1) / stride + 1; }

// conv3x3-BN-ReLU, the stem that replaces ImageNet ResNet's 7x7 conv and max-pool.
struct StemImpl : nn::Module {
  StemImpl(int64_t in, int64_t out)
      : conv(register_module("conv", conv3x3(in, out, /*stride=*/1))),
        bn(register_module("bn", nn::BatchNorm2d(out))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(bn(conv(x))); }
  nn::Conv2d conv;
  nn::BatchNorm2d bn;
};
TORCH_MODULE(Stem);

// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); the shortcut is a 1x1 conv + BN when the
// stride or channel count changes, the identity otherwise.
struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module("conv1", conv3x3(in, out, stride))),
        bn1(register_module("bn1", nn::BatchNorm2d(out))),
        conv2(register_module("conv2", conv3x3(out, out, /*stride=*/1))),
        bn2(register_module("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut = register_module(
          "shortcut",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::relu(bn1(conv1(x)));
    h = bn2(conv2(h));
    return torch::relu(h + (shortcut.is_empty() ? x : shortcut->forward(x)));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

}  // namespace

std::unique_ptr<Model> make_resnet18_cifar(const ModelInputs& in) {
  SATURATE_CHECK(in.sample_shape.size() == 3, "model: resnet18-cifar takes images [C,H,W], got ",
                 in.sample_shape.size(), "-d samples; use --model mlp for vectors");
  const int64_t c = in.sample_shape[0];
  int64_t h = in.sample_shape[1], w = in.sample_shape[2];
  SATURATE_CHECK(h >= 8 && w >= 8, "model: resnet18-cifar needs images of at least 8x8, got ", h,
                 "x", w);
  constexpr int64_t kWidths[] = {64, 128, 256, 512};
  constexpr int64_t kBlocksPerStage = 2;

  // FLOPs count the convolutions and the linear layer, 2 per multiply-add; batch norm, ReLU,
  // the residual adds and the pooling are O(activations) and left out.
  int64_t macs = c * kWidths[0] * 9 * h * w;
  nn::Sequential net(Stem(c, kWidths[0]));
  int64_t channels = kWidths[0];
  for (int64_t stage = 0; stage < 4; ++stage) {
    for (int64_t b = 0; b < kBlocksPerStage; ++b) {
      const int64_t out = kWidths[stage];
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      const int64_t ho = conv_out(h, stride), wo = conv_out(w, stride);
      macs += channels * out * 9 * ho * wo + out * out * 9 * ho * wo;
      if (stride != 1 || channels != out) macs += channels * out * ho * wo;
      net->push_back(BasicBlock(channels, out, stride));
      channels = out;
      h = ho;
      w = wo;
    }
  }
  net->push_back(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(1)));
  net->push_back(nn::Flatten());
  net->push_back(nn::Linear(channels, in.num_classes));
  macs += channels * in.num_classes;
  return std::make_unique<SequentialModel>("resnet18-cifar", std::move(net), 2 * macs);
}

}  // namespace saturate::detail
