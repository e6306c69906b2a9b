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
    EXPECT_EQ(cpu_budget_stats().peak_memory_bytes - before, 3 << 20);
  }
  EXPECT_EQ(cpu_budget_stats().live_bytes, before);
  EXPECT_EQ(cpu_budget_stats().peak_memory_bytes - before, 3 << 20);
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

// Issue 14: the cache.

TEST(CpuCache, SizeClassesAreAtMostAnEighthOverAndMonotonic) {
  size_t last = 0;
  for (size_t n = 1; n < (size_t{64} << 20); n = n * 5 / 4 + 1) {
    const size_t c = cpu_cache_size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c, n <= 4096 ? n + 63 : n + n / 8) << n;
    EXPECT_GE(c, last);
    last = c;
  }
  EXPECT_EQ(cpu_cache_size_class(1 << 20), size_t{1} << 20);
  EXPECT_EQ(cpu_cache_size_class((1 << 19) + 1), (size_t{1} << 19) + (size_t{1} << 16));
  EXPECT_EQ(cpu_cache_size_class((1 << 20) + 1), (size_t{1} << 20) + (size_t{64} << 10));
  EXPECT_EQ(cpu_cache_size_class(205520896), size_t{205520896});  // 2048x32x28x28 floats
}

TEST(CpuCache, DataIs64ByteAligned) {
  install_cpu_budget();
  for (int64_t n : {1, 3, 63, 65, 4097, 100000, 3 << 20}) {
    at::Tensor t = torch::empty({n}, torch::kByte);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << n;
  }
}

TEST(CpuCache, AFreedBlockServesTheNextRequestOfItsClass) {
  install_cpu_budget();
  release_cpu_cache();
  void* first = nullptr;
  {
    at::Tensor t = torch::empty({3 << 20}, torch::kFloat);  // 12 MiB: glibc would mmap it
    first = t.data_ptr();
  }
  const CpuBudgetStats mid = cpu_budget_stats();
  EXPECT_GE(mid.cached_bytes, 12 << 20);
  at::Tensor again = torch::empty({(3 << 20) - 5}, torch::kFloat);  // same class
  EXPECT_EQ(again.data_ptr(), first);
  const CpuBudgetStats after = cpu_budget_stats();
  EXPECT_EQ(after.num_system_allocations, mid.num_system_allocations);
  EXPECT_EQ(after.cached_bytes, mid.cached_bytes - (12 << 20));
}

// What a training step asks for repeats every step: after the first, the system sees (almost)
// nothing.
TEST(CpuCache, TrainingStepsAfterTheFirstAllocateFromTheCache) {
  install_cpu_budget();
  release_cpu_cache();
  torch::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)),
                            torch::nn::ReLU(), torch::nn::Flatten(),
                            torch::nn::Linear(16 * 28 * 28, 10));
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const at::Tensor x = torch::randn({256, 1, 28, 28});
  const at::Tensor y = torch::randint(0, 10, {256}, torch::kLong);
  std::vector<int64_t> system, requests;
  for (int step = 0; step < 5; ++step) {
    const CpuBudgetStats before = cpu_budget_stats();
    opt.zero_grad();
    at::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    (void)loss.item<float>();
    const CpuBudgetStats after = cpu_budget_stats();
    system.push_back(after.num_system_allocations - before.num_system_allocations);
    requests.push_back(after.num_allocations - before.num_allocations);
  }
  EXPECT_GT(system[0], 10);
  for (int step = 2; step < 5; ++step) {
    EXPECT_GT(requests[step], 20);
    EXPECT_LE(system[step], 1) << "step " << step << ": " << system[step] << " of "
                               << requests[step] << " requests reached the system";
  }
  EXPECT_GT(cpu_budget_stats().cached_bytes, 256 * 16 * 28 * 28 * 4);  // the conv output, freed
}

TEST(CpuCache, ReleaseReturnsEveryCachedByte) {
  install_cpu_budget();
  { at::Tensor t = torch::empty({4 << 20}, torch::kFloat); }
  const CpuBudgetStats full = cpu_budget_stats();
  ASSERT_GE(full.cached_bytes, 16 << 20);
  EXPECT_GE(release_cpu_cache(), 16 << 20);
  const CpuBudgetStats empty = cpu_budget_stats();
  EXPECT_EQ(empty.cached_bytes, 0);
  EXPECT_EQ(empty.reserved_bytes, full.reserved_bytes - full.cached_bytes);
  auto mem = make_device_memory(c10::Device("cpu"), 0);
  { at::Tensor t = torch::empty({1 << 20}, torch::kFloat); }
  EXPECT_GE(mem->snapshot().cached_bytes, 4 << 20);
  mem->release_cached();
  EXPECT_EQ(mem->snapshot().cached_bytes, 0);
}

// The budget refuses at the same point with a full cache as with an empty one, and the cache
// never takes the bytes held from the system past the budget.
TEST(CpuCache, TheBudgetRefusesAtTheSamePointAndCountsTheCache) {
  install_cpu_budget();
  BudgetGuard guard;
  release_cpu_cache();
  const int64_t live = cpu_budget_stats().live_bytes;
  const int64_t budget = 16 << 20;
  set_cpu_budget(live + budget);
  for (int round = 0; round < 2; ++round) {
    // Round 1 starts with 12 MiB of another size class cached.
    if (round == 1) {
      { at::Tensor filler = torch::empty({3 << 20}, torch::kFloat); }
      ASSERT_GE(cpu_budget_stats().cached_bytes, 12 << 20);
    }
    EXPECT_THROW(torch::empty({budget + 1}, torch::kByte), c10::OutOfMemoryError) << round;
    {
      at::Tensor exact = torch::empty({budget}, torch::kByte);  // exactly the budget fits
      const CpuBudgetStats s = cpu_budget_stats();
      EXPECT_EQ(s.live_bytes, live + budget);
      // Held from the system: the budget, plus at most the size-class rounding of what was
      // live before (an eighth). Keeping the 12 MiB block would have been 12 MiB over.
      EXPECT_LE(s.reserved_bytes, s.limit_bytes + live / 8 + 4096) << round;
      if (round == 1) {
        EXPECT_LT(s.cached_bytes, 12 << 20);
      }
    }
  }
  set_cpu_budget(0);
  EXPECT_EQ(cpu_budget_stats().live_bytes, live);
}

// Without a budget the cache keeps at most twice the peak of live blocks it has seen since it
// was last emptied: a one-off burst of sizes that never recur cannot pile up.
TEST(CpuCache, WithoutABudgetTheCacheHoldsAtMostTwiceThePeak) {
  install_cpu_budget();
  release_cpu_cache();
  const CpuBudgetStats start = cpu_budget_stats();
  const int64_t floor = start.reserved_bytes;  // live blocks, nothing cached
  int64_t largest = 0, sum = 0;
  for (int64_t n = 1 << 20; n < (64 << 20); n = n * 3 / 2) {
    at::Tensor t = torch::empty({n}, torch::kByte);  // each its own class
    largest = std::max<int64_t>(largest, static_cast<int64_t>(cpu_cache_size_class(n)));
    sum += static_cast<int64_t>(cpu_cache_size_class(n));
  }
  const CpuBudgetStats s = cpu_budget_stats();
  EXPECT_LE(s.cached_bytes, 2 * (floor + largest));
  EXPECT_LT(s.cached_bytes, sum * 3 / 4) << "everything freed was kept";
}

TEST(CpuBudget, NegativeBudgetIsAnError) { EXPECT_THROW(set_cpu_budget(-1), Error); }

TEST(DeviceMemory, CpuMemoryReportsTheBudgetAndPeaks) {
  auto mem = make_device_memory(c10::Device("cpu"), 1LL << 30);
  BudgetGuard guard;
  EXPECT_EQ(mem->limit_bytes(), 1LL << 30);
  EXPECT_EQ(mem->describe(), "cpu caching allocator, budget 1.00 GiB");
  mem->reset_peak();
  const int64_t base = mem->snapshot().live_bytes;
  { at::Tensor t = torch::empty({1 << 18}, torch::kFloat); }
  EXPECT_EQ(mem->snapshot().peak_memory_bytes - base, 1 << 20);
  EXPECT_EQ(mem->snapshot().live_bytes, base);
}

TEST(DeviceMemory, CudaInABuildOrMachineWithoutItIsAnError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(make_device_memory(c10::Device("cuda:0"), 0), std::exception);
}

}  // namespace saturate
