// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/cpu_budget.h"

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/device/device_memory.h"

namespace saturate {
namespace {

// Every test leaves the budget unlimited for the next one.
struct BudgetGuard {
  ~BudgetGuard() { set_cpu_budget(0); }
};

}  // namespace

TEST(CpuBudget, CountsLiveAndPeakBytesOfCpuTensors) {
  install_cpu_budget();
  BudgetGuard guard;
  const int64_t before = cpu_budget_stats().live_bytes;
  reset_cpu_budget_peak();
  {
    at::Tensor t = torch::empty({1024, 256}, torch::kFloat);  // 1 MiB
    EXPECT_EQ(cpu_budget_stats().live_bytes - before, 1 << 20);
    at::Tensor u = torch::empty({1024, 512}, torch::kFloat);  // 2 MiB
    EXPECT_EQ(cpu_budget_stats().peak_bytes - before, 3 << 20);
  }
  EXPECT_EQ(cpu_budget_stats().live_bytes, before);
  EXPECT_EQ(cpu_budget_stats().peak_bytes - before, 3 << 20);
}

TEST(CpuBudget, ThrowsOutOfMemoryErrorPastTheBudgetAndRecovers) {
  install_cpu_budget();
  BudgetGuard guard;
  const int64_t live = cpu_budget_stats().live_bytes;
  set_cpu_budget(live + (4 << 20));
  const int64_t ooms = cpu_budget_stats().num_ooms;
  EXPECT_THROW(torch::empty({8 << 20}, torch::kFloat), c10::OutOfMemoryError);  // 32 MiB
  EXPECT_EQ(cpu_budget_stats().num_ooms, ooms + 1);
  EXPECT_EQ(cpu_budget_stats().live_bytes, live);
  at::Tensor small = torch::ones({1 << 20}, torch::kByte);  // 1 MiB still fits
  EXPECT_EQ(small[12345].item<int>(), 1);
}

TEST(CpuBudget, TheMessageSaysWhatWasAskedAndTheBudget) {
  install_cpu_budget();
  BudgetGuard guard;
  set_cpu_budget(cpu_budget_stats().live_bytes + 1024);
  try {
    torch::empty({1 << 20}, torch::kFloat);
    FAIL();
  } catch (const c10::OutOfMemoryError& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("tried to allocate 4.00 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("--memory-limit"), std::string::npos) << what;
  }
}

TEST(CpuBudget, CopiesAndClonesWorkThroughTheAllocator) {
  install_cpu_budget();
  at::Tensor a = torch::arange(1000, torch::kFloat);
  at::Tensor b = a.clone();
  EXPECT_TRUE(torch::equal(a, b));
  void* raw = c10::GetCPUAllocator()->raw_allocate(128);
  ASSERT_NE(raw, nullptr);
  c10::GetCPUAllocator()->raw_deallocate(raw);
}

TEST(CpuBudget, NegativeBudgetIsAnError) { EXPECT_THROW(set_cpu_budget(-1), Error); }

TEST(DeviceMemory, CpuMemoryReportsTheBudgetAndPeaks) {
  auto mem = make_device_memory(c10::Device("cpu"), 1LL << 30);
  BudgetGuard guard;
  EXPECT_EQ(mem->limit_bytes(), 1LL << 30);
  EXPECT_EQ(mem->describe(), "cpu budget 1.00 GiB");
  mem->reset_peak();
  const int64_t base = mem->snapshot().live_bytes;
  { at::Tensor t = torch::empty({1 << 18}, torch::kFloat); }
  EXPECT_EQ(mem->snapshot().peak_bytes - base, 1 << 20);
  EXPECT_EQ(mem->snapshot().live_bytes, base);
}

TEST(DeviceMemory, CudaInABuildOrMachineWithoutItIsAnError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(make_device_memory(c10::Device("cuda:0"), 0), std::exception);
}

}  // namespace saturate
