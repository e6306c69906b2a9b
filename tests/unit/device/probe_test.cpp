// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/probe.h"

#include <gtest/gtest.h>

#include <string>

#include "saturate/core/error.h"

namespace saturate {
namespace {

DeviceProbe cpu_only_probe() {
  DeviceProbe p;
  p.torch_version = "2.11.0";
  p.cpu.cores_online = p.cpu.cores_usable = 2;
  p.torch_has_cuda = true;
  p.cuda_available = false;
  p.cuda_unavailable_reason =
      "no NVIDIA driver: libcuda.so.1 cannot be loaded (libcuda.so.1: cannot open shared object "
      "file: No such file or directory)";
  return p;
}

DeviceProbe two_gpu_probe() {
  DeviceProbe p = cpu_only_probe();
  p.cuda_available = true;
  p.cuda_unavailable_reason.clear();
  for (int i = 0; i < 2; ++i) {
    CudaDeviceInfo g;
    g.index = i;
    g.name = "NVIDIA H200";
    g.mem_total_bytes = int64_t{140} << 30;
    g.cc_major = 9;
    p.gpus.push_back(g);
  }
  return p;
}

std::string select_error(const std::string& spec, const DeviceProbe& probe) {
  try {
    select_device(DeviceSpec::parse(spec), probe);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SelectDevice, AutoFallsBackToCpuWithReason) {
  const DeviceChoice c = select_device(DeviceSpec::parse("auto"), cpu_only_probe());
  EXPECT_TRUE(c.device.is_cpu());
  EXPECT_NE(c.reason.find("no NVIDIA driver"), std::string::npos) << c.reason;
}

TEST(SelectDevice, AutoPicksFirstGpu) {
  const DeviceChoice c = select_device(DeviceSpec::parse("auto"), two_gpu_probe());
  EXPECT_EQ(c.device, c10::Device(c10::DeviceType::CUDA, 0));
  EXPECT_NE(c.reason.find("NVIDIA H200"), std::string::npos) << c.reason;
}

TEST(SelectDevice, CpuIsAlwaysAvailable) {
  EXPECT_TRUE(select_device(DeviceSpec::parse("cpu"), two_gpu_probe()).device.is_cpu());
  EXPECT_TRUE(select_device(DeviceSpec::parse("cpu"), cpu_only_probe()).device.is_cpu());
}

TEST(SelectDevice, CudaWithoutIndexMeansCuda0) {
  EXPECT_EQ(select_device(DeviceSpec::parse("cuda"), two_gpu_probe()).device,
            c10::Device(c10::DeviceType::CUDA, 0));
  EXPECT_EQ(select_device(DeviceSpec::parse("cuda:1"), two_gpu_probe()).device,
            c10::Device(c10::DeviceType::CUDA, 1));
}

TEST(SelectDevice, CudaUnavailableThrowsWithReasonAndFix) {
  const std::string msg = select_error("cuda", cpu_only_probe());
  EXPECT_EQ(
      msg.rfind("device: cuda requested but no NVIDIA driver: libcuda.so.1 cannot be loaded", 0),
      0u)
      << msg;
  EXPECT_NE(msg.find("; use --device cpu"), std::string::npos) << msg;
}

TEST(SelectDevice, CudaUnavailableWithoutReasonStillExplains) {
  DeviceProbe p = cpu_only_probe();
  p.cuda_unavailable_reason.clear();
  EXPECT_NE(select_error("cuda:0", p).find("cuda:0 requested but CUDA is not available"),
            std::string::npos);
}

TEST(SelectDevice, IndexOutOfRangeNamesTheCount) {
  const std::string msg = select_error("cuda:2", two_gpu_probe());
  EXPECT_NE(msg.find("device: cuda:2 requested but 2 CUDA devices are visible (cuda:0 to cuda:1)"),
            std::string::npos)
      << msg;
  DeviceProbe one = two_gpu_probe();
  one.gpus.pop_back();
  EXPECT_NE(select_error("cuda:1", one).find("1 CUDA device is visible (cuda:0)"),
            std::string::npos);
}

// Issue 34 (defect 1): select_device gives cuda:0 for auto, and the per-rank mapping only
// applied to a device without an index, so every rank of a 4-GPU node trained on cuda:0.
TEST(SelectRankDevice, Issue34_EachLocalRankGetsItsOwnGpu) {
  DeviceProbe four = two_gpu_probe();
  for (int i = 2; i < 4; ++i) {
    four.gpus.push_back(four.gpus[0]);
    four.gpus.back().index = i;
  }
  for (const char* spec : {"auto", "cuda"}) {
    for (int rank = 0; rank < 4; ++rank) {
      const DeviceChoice c = select_rank_device(DeviceSpec::parse(spec), four, rank, 4);
      EXPECT_EQ(c.device, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(rank)))
          << spec << " rank " << rank << ": " << c.reason;
      EXPECT_NE(c.reason.find("local rank " + std::to_string(rank)), std::string::npos) << c.reason;
    }
  }
  // An explicit GPU is every rank's (the user asked for it); the CPU stays the CPU.
  EXPECT_EQ(select_rank_device(DeviceSpec::parse("cuda:1"), four, 3, 4).device,
            c10::Device(c10::DeviceType::CUDA, 1));
  EXPECT_TRUE(select_rank_device(DeviceSpec::parse("auto"), cpu_only_probe(), 3, 4).device.is_cpu());
  // One process: the first GPU, as before.
  EXPECT_EQ(select_rank_device(DeviceSpec::parse("auto"), four, 0, 1).device,
            c10::Device(c10::DeviceType::CUDA, 0));
  // More ranks than GPUs: one line naming both counts.
  try {
    select_rank_device(DeviceSpec::parse("auto"), two_gpu_probe(), 2, 4);
    FAIL() << "4 ranks on 2 GPUs accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 data-parallel ranks on this node but 2 CUDA devices"),
              std::string::npos)
        << e.what();
  }
}

TEST(ProbeDevices, ReportsThisMachine) {
  const DeviceProbe p = probe_devices();
  EXPECT_EQ(p.torch_version.rfind("2.", 0), 0u) << p.torch_version;
  EXPECT_GE(p.cpu.cores_online, 1);
  EXPECT_GE(p.cpu.cores_usable, 1);
  EXPECT_LE(p.cpu.cores_usable, p.cpu.cores_online);
  EXPECT_GT(p.cpu.mem_total_bytes, 0);
  EXPECT_GE(p.intra_op_threads, 1);
  EXPECT_GE(p.inter_op_threads, 1);
  EXPECT_FALSE(p.blas.name.empty());
  if (p.cuda_available) {
    EXPECT_FALSE(p.gpus.empty());
    EXPECT_TRUE(p.cuda_unavailable_reason.empty());
  } else {
    EXPECT_TRUE(p.gpus.empty());
    EXPECT_FALSE(p.cuda_unavailable_reason.empty());
  }
#if SATURATE_HAS_CUDA
  EXPECT_TRUE(p.torch_has_cuda);
  EXPECT_FALSE(p.cuda_runtime_version.empty());
#endif
}

TEST(ProbeDevices, AutoSelectionAgreesWithAvailability) {
  const DeviceProbe p = probe_devices();
  const DeviceChoice c = select_device(DeviceSpec{}, p);
  EXPECT_EQ(c.device.is_cuda(), p.cuda_available) << c.reason;
  EXPECT_FALSE(c.reason.empty());
}

}  // namespace
}  // namespace saturate
