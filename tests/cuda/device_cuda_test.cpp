// SPDX-License-Identifier: Apache-2.0
// The device probe and preflight on a real GPU; every test skips without one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "saturate/core/error.h"
#include "saturate/device/doctor.h"
#include "saturate/device/preflight.h"
#include "saturate/device/probe.h"

namespace saturate {
namespace {

#define SATURATE_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "requires CUDA"

TEST(ProbeCuda, ListsGpusWithMemoryAndVersions) {
  SATURATE_REQUIRE_CUDA();
  const DeviceProbe p = probe_devices();
  EXPECT_TRUE(p.torch_has_cuda);
  EXPECT_TRUE(p.cuda_available);
  EXPECT_TRUE(p.cuda_unavailable_reason.empty()) << p.cuda_unavailable_reason;
  ASSERT_GE(p.gpus.size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(p.gpus.size()), torch::cuda::device_count());
  for (size_t i = 0; i < p.gpus.size(); ++i) {
    const CudaDeviceInfo& g = p.gpus[i];
    EXPECT_EQ(g.index, static_cast<int>(i));
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.mem_total_bytes, 0);
    EXPECT_GE(g.cc_major, 3);
    EXPECT_GT(g.multiprocessors, 0);
    EXPECT_EQ(g.has_bf16, g.cc_major >= 8);
  }
  EXPECT_FALSE(p.cuda_runtime_version.empty());
}

TEST(SelectDeviceCuda, AutoPicksCuda0) {
  SATURATE_REQUIRE_CUDA();
  const DeviceChoice c = select_device(DeviceSpec::parse("auto"), probe_devices());
  EXPECT_EQ(c.device, c10::Device(c10::DeviceType::CUDA, 0));
  EXPECT_NE(c.reason.find("cuda:0"), std::string::npos) << c.reason;
}

TEST(SelectDeviceCuda, IndexPastLastDeviceIsRejected) {
  SATURATE_REQUIRE_CUDA();
  const DeviceProbe p = probe_devices();
  DeviceSpec spec;
  spec.kind = DeviceKind::kCuda;
  spec.index = static_cast<int>(p.gpus.size());
  EXPECT_THROW(select_device(spec, p), Error);
}

TEST(DoctorCuda, CudaCheckIsOk) {
  SATURATE_REQUIRE_CUDA();
  DoctorOptions o;
  o.measure_gemm = false;
  o.data_spec = "synthetic";
  for (const auto& c : run_doctor(o, probe_devices())) {
    if (c.name == "cuda") {
      EXPECT_EQ(c.status, CheckStatus::kOk) << c.detail;
      EXPECT_NE(c.detail.find("cuda:0"), std::string::npos) << c.detail;
    }
  }
}

TEST(CheckSameDeviceCuda, CpuParameterOnGpuRunIsNamed) {
  SATURATE_REQUIRE_CUDA();
  const c10::Device cuda0(c10::DeviceType::CUDA, 0);
  torch::nn::Linear model(4, 3);
  const auto batch = torch::ones({8, 4}, torch::TensorOptions().device(cuda0));
  try {
    check_same_device(model->parameters(), {batch}, cuda0);
    FAIL() << "expected saturate::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 0 (shape [3, 4]) is on cpu"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("call model.to(cuda:0)"), std::string::npos);
  }
  model->to(cuda0);
  EXPECT_NO_THROW(check_same_device(model->parameters(), {batch}, cuda0));
  EXPECT_NO_THROW(
      check_same_device(model->parameters(), {batch}, c10::Device(c10::DeviceType::CUDA)));
  EXPECT_THROW(check_same_device(model->parameters(), {batch.cpu()}, cuda0), Error);
}

}  // namespace
}  // namespace saturate
