// SPDX-License-Identifier: Apache-2.0
// Runs on the CPU: a meta tensor stands in for a tensor on another device.
#include "saturate/device/preflight.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "saturate/core/error.h"

namespace saturate {
namespace {

const c10::Device kCpu(c10::DeviceType::CPU);

std::string preflight_error(const std::vector<at::Tensor>& params,
                            const std::vector<at::Tensor>& batch, const c10::Device& device) {
  try {
    check_same_device(params, batch, device);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckSameDevice, PassesWhenEverythingIsOnCpu) {
  torch::nn::Linear model(4, 3);
  EXPECT_NO_THROW(
      check_same_device(model->parameters(), {torch::ones({8, 4}), torch::zeros({8})}, kCpu));
}

TEST(CheckSameDevice, PassesForEmptyAndUndefinedTensors) {
  EXPECT_NO_THROW(check_same_device({}, {}, kCpu));
  EXPECT_NO_THROW(check_same_device({at::Tensor()}, {at::Tensor()}, kCpu));
}

TEST(CheckSameDevice, NamesTheParameterOnAnotherDevice) {
  const std::vector<at::Tensor> params = {torch::ones({4, 3}), torch::empty({2}, torch::kMeta)};
  const std::string msg = preflight_error(params, {}, kCpu);
  EXPECT_NE(msg.find("preflight: parameter 1 (shape [2]) is on meta but training runs on cpu"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("call model.to(cpu)"), std::string::npos) << msg;
}

TEST(CheckSameDevice, NamesTheBatchTensorOnAnotherDevice) {
  const std::string msg = preflight_error(
      {torch::ones({4, 3})}, {torch::ones({8, 4}), torch::empty({8}, torch::kMeta)}, kCpu);
  EXPECT_NE(msg.find("batch tensor 1 (shape [8]) is on meta"), std::string::npos) << msg;
  EXPECT_NE(msg.find("move the batch with .to(cpu)"), std::string::npos) << msg;
}

TEST(CheckSameDevice, RejectsParametersWhenDeviceDiffersFromTarget) {
  const c10::Device meta(c10::DeviceType::Meta);
  const std::string msg = preflight_error({torch::ones({4, 3})}, {}, meta);
  EXPECT_NE(msg.find("parameter 0 (shape [4, 3]) is on cpu but training runs on meta"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace saturate
