// SPDX-License-Identifier: Apache-2.0
// The doctor on hand-built probes, so each check's verdict is deterministic.
#include "saturate/device/doctor.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "saturate/device/cpu_budget.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

DeviceProbe healthy_probe() {
  DeviceProbe p;
  p.torch_version = "2.11.0";
  p.cpu.model = "Test CPU";
  p.cpu.cores_online = p.cpu.cores_usable = 2;
  p.cpu.mem_total_bytes = int64_t{16} << 30;
  p.blas.name = "MKL";
  p.blas.has_onednn = true;
  p.intra_op_threads = 2;
  p.inter_op_threads = 2;
  p.torch_has_cuda = true;
  p.cuda_available = false;
  p.cuda_unavailable_reason = "no NVIDIA driver: libcuda.so.1 cannot be loaded (not found)";
  return p;
}

DoctorOptions no_timing() {
  DoctorOptions o;
  o.measure_gemm = false;
  o.measure_page_faults = false;
  o.data_spec = "synthetic";
  return o;
}

// By value: callers pass the temporary that run_doctor returns.
DoctorCheck find(const std::vector<DoctorCheck>& checks, const std::string& name) {
  for (const auto& c : checks) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no check named " << name;
  return DoctorCheck{"<missing>", CheckStatus::kFail, "", ""};
}

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(Doctor, StatusNames) {
  EXPECT_EQ(to_string(CheckStatus::kOk), "ok");
  EXPECT_EQ(to_string(CheckStatus::kWarn), "warn");
  EXPECT_EQ(to_string(CheckStatus::kFail), "fail");
}

TEST(Doctor, RunsEveryCheckInOrder) {
  ScopedEnv omp("OMP_NUM_THREADS", nullptr), mkl("MKL_NUM_THREADS", nullptr);
  ScopedEnv cache("SATURATE_CPU_CACHE", nullptr);
  const auto checks = run_doctor(no_timing(), healthy_probe());
  std::vector<std::string> names;
  for (const auto& c : checks) names.push_back(c.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"libtorch", "cuda", "blas", "threads", "onednn",
                                      "precision", "allocator", "memory", "dataset"}));
  for (const auto& c : checks) {
    if (c.status == CheckStatus::kOk) {
      EXPECT_TRUE(c.fix.empty()) << c.name;
    } else {
      EXPECT_FALSE(c.fix.empty()) << c.name;
    }
    EXPECT_FALSE(c.detail.empty()) << c.name;
  }
}

TEST(Doctor, MklBlasIsOk) {
  const DoctorCheck c = find(run_doctor(no_timing(), healthy_probe()), "blas");
  EXPECT_EQ(c.status, CheckStatus::kOk);
  EXPECT_NE(c.detail.find("MKL (built into LibTorch)"), std::string::npos) << c.detail;
}

TEST(Doctor, ReferenceBlasFailsWithInstallFix) {
  DeviceProbe p = healthy_probe();
  p.blas.name = "reference BLAS";
  p.blas.library_path = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";
  p.blas.is_slow = true;
  const DoctorCheck c = find(run_doctor(no_timing(), p), "blas");
  EXPECT_EQ(c.status, CheckStatus::kFail);
  EXPECT_NE(c.detail.find("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"), std::string::npos);
  EXPECT_NE(c.fix.find("apt-get install libopenblas0-openmp"), std::string::npos) << c.fix;
  EXPECT_NE(c.fix.find("update-alternatives --config libblas.so.3-x86_64-linux-gnu"),
            std::string::npos)
      << c.fix;
}

TEST(Doctor, OldLibTorchFails) {
  DeviceProbe p = healthy_probe();
  p.torch_version = "1.13.0";
  EXPECT_EQ(find(run_doctor(no_timing(), p), "libtorch").status, CheckStatus::kFail);
  p.torch_version = "2.4.0";
  EXPECT_EQ(find(run_doctor(no_timing(), p), "libtorch").status, CheckStatus::kOk);
  p.torch_version = "3.0.0";
  EXPECT_EQ(find(run_doctor(no_timing(), p), "libtorch").status, CheckStatus::kOk);
}

TEST(Doctor, NoGpuWarnsWithReason) {
  const DoctorCheck c = find(run_doctor(no_timing(), healthy_probe()), "cuda");
  EXPECT_EQ(c.status, CheckStatus::kWarn);
  EXPECT_NE(c.detail.find("no NVIDIA driver"), std::string::npos);
  EXPECT_NE(c.detail.find("training runs on CPU"), std::string::npos);
  EXPECT_NE(c.fix.find("NVIDIA driver"), std::string::npos);
}

TEST(Doctor, GpuListedWhenAvailable) {
  DeviceProbe p = healthy_probe();
  p.cuda_available = true;
  p.cuda_unavailable_reason.clear();
  p.cuda_runtime_version = "13.0";
  CudaDeviceInfo g;
  g.name = "NVIDIA H200";
  g.mem_total_bytes = int64_t{140} << 30;
  g.cc_major = 9;
  g.has_bf16 = g.has_tf32 = true;
  p.gpus.push_back(g);
  const DoctorCheck c = find(run_doctor(no_timing(), p), "cuda");
  EXPECT_EQ(c.status, CheckStatus::kOk);
  EXPECT_NE(c.detail.find("1 GPU: cuda:0 NVIDIA H200"), std::string::npos) << c.detail;
  EXPECT_NE(c.detail.find("CUDA 13.0"), std::string::npos) << c.detail;
}

TEST(Doctor, FewerThreadsThanCoresWarns) {
  ScopedEnv omp("OMP_NUM_THREADS", nullptr), mkl("MKL_NUM_THREADS", nullptr);
  DeviceProbe p = healthy_probe();
  p.intra_op_threads = 1;
  const DoctorCheck c = find(run_doctor(no_timing(), p), "threads");
  EXPECT_EQ(c.status, CheckStatus::kWarn);
  EXPECT_NE(c.fix.find("--threads 2"), std::string::npos) << c.fix;
  EXPECT_EQ(find(run_doctor(no_timing(), healthy_probe()), "threads").status, CheckStatus::kOk);
}

TEST(Doctor, ThreadCapInEnvironmentWarns) {
  ScopedEnv omp("OMP_NUM_THREADS", "1"), mkl("MKL_NUM_THREADS", nullptr);
  const DoctorCheck c = find(run_doctor(no_timing(), healthy_probe()), "threads");
  EXPECT_EQ(c.status, CheckStatus::kWarn);
  EXPECT_NE(c.detail.find("OMP_NUM_THREADS=1"), std::string::npos) << c.detail;
  EXPECT_NE(c.fix.find("unset OMP_NUM_THREADS"), std::string::npos) << c.fix;
}

TEST(Doctor, MissingOneDnnWarns) {
  DeviceProbe p = healthy_probe();
  p.blas.has_onednn = false;
  EXPECT_EQ(find(run_doctor(no_timing(), p), "onednn").status, CheckStatus::kWarn);
}

TEST(Doctor, ReportsMemory) {
  const DoctorCheck ok = find(run_doctor(no_timing(), healthy_probe()), "memory");
  EXPECT_EQ(ok.status, CheckStatus::kOk);
  EXPECT_NE(ok.detail.find("16.00 GiB"), std::string::npos) << ok.detail;
  DeviceProbe small = healthy_probe();
  small.cpu.mem_total_bytes = int64_t{1} << 30;
  EXPECT_EQ(find(run_doctor(no_timing(), small), "memory").status, CheckStatus::kWarn);
}

class DoctorDataset : public ::testing::Test {
 protected:
  void touch(const std::string& name) { std::ofstream(dir_.file(name)) << "x"; }
  DoctorCheck dataset_check() {
    DoctorOptions o = no_timing();
    o.data_spec = "fashion-mnist";
    return find(run_doctor(o, healthy_probe()), "dataset");
  }
  testing::TempDir dir_;
};

TEST_F(DoctorDataset, FashionMnistFilesPresentGzippedOrNot) {
  ScopedEnv env("SATURATE_FASHION_MNIST_DIR", dir_.path().c_str());
  touch("train-images-idx3-ubyte.gz");
  touch("train-labels-idx1-ubyte");
  touch("t10k-images-idx3-ubyte.gz");
  touch("t10k-labels-idx1-ubyte.gz");
  const DoctorCheck c = dataset_check();
  EXPECT_EQ(c.status, CheckStatus::kOk) << c.detail;
  EXPECT_NE(c.detail.find("SATURATE_FASHION_MNIST_DIR"), std::string::npos) << c.detail;
}

TEST_F(DoctorDataset, MissingFashionMnistFilesFailWithInstallFix) {
  ScopedEnv env("SATURATE_FASHION_MNIST_DIR", dir_.path().c_str());
  touch("train-images-idx3-ubyte.gz");
  const DoctorCheck c = dataset_check();
  EXPECT_EQ(c.status, CheckStatus::kFail);
  EXPECT_NE(c.detail.find("t10k-labels-idx1-ubyte"), std::string::npos) << c.detail;
  EXPECT_NE(c.fix.find("apt-get install dataset-fashion-mnist"), std::string::npos) << c.fix;
}

TEST_F(DoctorDataset, OtherSpecsAreSyntheticOrPaths) {
  DoctorOptions o = no_timing();
  o.data_spec = "synthetic";
  EXPECT_EQ(find(run_doctor(o, healthy_probe()), "dataset").status, CheckStatus::kOk);
  o.data_spec = dir_.path();
  EXPECT_EQ(find(run_doctor(o, healthy_probe()), "dataset").status, CheckStatus::kOk);
  o.data_spec = dir_.file("nope");
  EXPECT_EQ(find(run_doctor(o, healthy_probe()), "dataset").status, CheckStatus::kFail);
}

TEST(Doctor, PrecisionNamesNativeBf16AndFp16OrSaysFp32) {
  DeviceProbe p = healthy_probe();
  p.cpu.model = "AMD EPYC 7B13";
  DoctorCheck c = find(run_doctor(no_timing(), p), "precision");
  EXPECT_EQ(c.status, CheckStatus::kOk);
  EXPECT_NE(c.detail.find("AMD EPYC 7B13: no native bf16 or fp16"), std::string::npos) << c.detail;
  EXPECT_NE(c.detail.find("train in fp32"), std::string::npos) << c.detail;

  p.cpu.model = "Intel Xeon";
  p.cpu.has_bf16 = true;
  c = find(run_doctor(no_timing(), p), "precision");
  EXPECT_NE(c.detail.find("native bf16 (avx512_bf16/amx), no native fp16"), std::string::npos)
      << c.detail;
  EXPECT_EQ(c.detail.find("train in fp32"), std::string::npos) << c.detail;
  p.cpu.has_fp16 = true;
  c = find(run_doctor(no_timing(), p), "precision");
  EXPECT_NE(c.detail.find("native bf16 and fp16"), std::string::npos) << c.detail;
}

TEST(Doctor, AllocatorWarnsWhenTheCacheIsOffAndTellsPythonJobsTheFix) {
  {
    ScopedEnv cache("SATURATE_CPU_CACHE", nullptr);
    const DoctorCheck c = find(run_doctor(no_timing(), healthy_probe()), "allocator");
    EXPECT_EQ(c.status, CheckStatus::kOk);
    EXPECT_NE(c.detail.find("caches freed CPU tensor memory"), std::string::npos) << c.detail;
    EXPECT_NE(c.detail.find("MALLOC_MMAP_THRESHOLD_=4294967296"), std::string::npos) << c.detail;
  }
  ScopedEnv cache("SATURATE_CPU_CACHE", "off");
  const DoctorCheck c = find(run_doctor(no_timing(), healthy_probe()), "allocator");
  EXPECT_EQ(c.status, CheckStatus::kWarn);
  EXPECT_EQ(c.fix, "unset SATURATE_CPU_CACHE");
}

TEST(DoctorTiming, AllocatorMeasuresWhatAFreshPageCosts) {
  DoctorOptions o = no_timing();
  o.measure_page_faults = true;
  const DoctorCheck c = find(run_doctor(o, healthy_probe()), "allocator");
  EXPECT_NE(c.detail.find(" ms per GiB to fault in ("), std::string::npos) << c.detail;
  const PageFaultCost cost = measure_page_fault_cost(int64_t{8} << 20);
  // 8 MiB of 4 KiB pages is 2048 faults (fewer where the kernel maps huge pages).
  EXPECT_GT(cost.faults, 0);
  EXPECT_LE(cost.faults, 2048 + 64);
  EXPECT_GT(cost.us_per_fault, 0.0);
}

TEST(DoctorGemm, MeasuredCheckReportsRate) {
  DoctorOptions o = no_timing();
  o.measure_gemm = true;
  const DoctorCheck c = find(run_doctor(o, healthy_probe()), "blas");
  EXPECT_NE(c.detail.find("GFLOP/s"), std::string::npos) << c.detail;
}

}  // namespace
}  // namespace saturate
