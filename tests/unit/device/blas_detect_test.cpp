// SPDX-License-Identifier: Apache-2.0
// classify_blas on show_config text and /proc/self/maps paths as real installs produce them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/device/probe.h"

namespace saturate {
namespace {

// Abridged from the PyPI torch 2.11.0 wheel (MKL linked statically).
const char* kWheelConfig = R"(PyTorch built with:
  - GCC 13.3
  - C++ Version: 201703
  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64 architecture applications
  - Intel(R) MKL-DNN v3.10.2 (Git Hash f1d471933dc852f956fd05389f9313c7148783d5)
  - OpenMP 201511 (a.k.a. OpenMP 4.5)
  - LAPACK is enabled (usually provided by MKL)
  - NNPACK is enabled
  - CPU capability usage: AVX512
  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, CUDA_VERSION=13.0, LAPACK_INFO=mkl, TORCH_VERSION=2.11.0, USE_CUDA=ON, USE_MKL=ON, USE_MKLDNN=ON, USE_OPENMP=ON,
)";

// A LibTorch linked against plain libblas.so.3 (Debian style), without oneDNN.
const char* kGenericConfig = R"(PyTorch built with:
  - GCC 12.2
  - OpenMP 201511 (a.k.a. OpenMP 4.5)
  - LAPACK is enabled (usually provided by MKL)
  - Build settings: BLAS_INFO=generic, BUILD_TYPE=Release, LAPACK_INFO=generic, TORCH_VERSION=1.13.0, USE_CUDA=OFF, USE_MKL=OFF, USE_MKLDNN=OFF,
)";

const char* kOpenBlasConfig =
    "PyTorch built with:\n  - Build settings: BLAS_INFO=open, LAPACK_INFO=open, USE_MKLDNN=ON,\n";

const std::vector<std::string> kCommonLibs = {
    "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libgomp.so.1",
    "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"};

std::vector<std::string> with(std::vector<std::string> libs, const std::string& extra) {
  libs.insert(libs.begin() + 1, extra);
  return libs;
}

TEST(ClassifyBlas, MklBuiltIntoWheel) {
  const BlasInfo b = classify_blas(kWheelConfig, kCommonLibs);
  EXPECT_EQ(b.name, "MKL");
  EXPECT_EQ(b.library_path, "");
  EXPECT_FALSE(b.is_slow);
  EXPECT_TRUE(b.has_onednn);
  EXPECT_NE(b.build_config.find("Math Kernel Library Version 2024.2"), std::string::npos);
  EXPECT_NE(b.build_config.find("MKL-DNN v3.10.2"), std::string::npos);
  EXPECT_NE(b.build_config.find("BLAS_INFO=mkl, LAPACK_INFO=mkl, USE_MKL=ON, USE_MKLDNN=ON"),
            std::string::npos)
      << b.build_config;
  EXPECT_EQ(b.build_config.find("CUDA_VERSION"), std::string::npos) << b.build_config;
}

TEST(ClassifyBlas, MklIgnoresNumpysPrivateOpenBlas) {
  const BlasInfo b = classify_blas(
      kWheelConfig,
      with(kCommonLibs, "/venv/site-packages/numpy.libs/libscipy_openblas64_-32a4b2a6.so"));
  EXPECT_EQ(b.name, "MKL");
  EXPECT_EQ(b.library_path, "");
}

TEST(ClassifyBlas, DebianReferenceBlasIsSlow) {
  const std::string lib = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";
  const BlasInfo b = classify_blas(kGenericConfig, with(kCommonLibs, lib));
  EXPECT_EQ(b.name, "reference BLAS");
  EXPECT_EQ(b.library_path, lib);
  EXPECT_TRUE(b.is_slow);
  EXPECT_FALSE(b.has_onednn);
}

TEST(ClassifyBlas, DebianOpenBlasAlternative) {
  const std::string lib = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3";
  const BlasInfo b = classify_blas(kGenericConfig, with(kCommonLibs, lib));
  EXPECT_EQ(b.name, "OpenBLAS");
  EXPECT_EQ(b.library_path, lib);
  EXPECT_FALSE(b.is_slow);
}

TEST(ClassifyBlas, OpenMpOpenBlasAndItsLibopenblas) {
  const BlasInfo b = classify_blas(
      kOpenBlasConfig,
      with(kCommonLibs, "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"));
  EXPECT_EQ(b.name, "OpenBLAS");
  EXPECT_TRUE(b.has_onednn);
}

TEST(ClassifyBlas, BlisAlternative) {
  const BlasInfo b = classify_blas(
      kGenericConfig, with(kCommonLibs, "/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3"));
  EXPECT_EQ(b.name, "BLIS");
}

TEST(ClassifyBlas, ReferenceWinsOverUnrelatedOpenBlasForGenericBuild) {
  // libtorch binds libblas.so.3; an OpenBLAS loaded by something else does not help it.
  std::vector<std::string> libs = kCommonLibs;
  libs.push_back("/usr/lib/x86_64-linux-gnu/libopenblas.so.0");
  libs.push_back("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3");
  EXPECT_EQ(classify_blas(kGenericConfig, libs).name, "reference BLAS");
}

TEST(ClassifyBlas, OpenBlasBuildStaticallyLinked) {
  const BlasInfo b = classify_blas(kOpenBlasConfig, kCommonLibs);
  EXPECT_EQ(b.name, "OpenBLAS");
  EXPECT_EQ(b.library_path, "");
}

TEST(ClassifyBlas, UnknownWhenNothingIdentifies) {
  const BlasInfo b = classify_blas(kGenericConfig, kCommonLibs);
  EXPECT_EQ(b.name, "unknown");
  EXPECT_EQ(b.library_path, "");
  EXPECT_FALSE(b.is_slow);
  EXPECT_EQ(classify_blas("", {}).name, "unknown");
}

TEST(DetectBlas, FindsMklInTheWheel) {
  const BlasInfo b = detect_blas();
  EXPECT_FALSE(b.name.empty());
  EXPECT_FALSE(b.build_config.empty());
}

TEST(MeasureGemm, ReturnsPositiveRate) {
  EXPECT_GT(measure_gemm_gflops(/*n=*/128, /*repeats=*/3), 0.0);
}

TEST(MeasureGemm, RejectsNonPositiveArguments) {
  EXPECT_THROW(measure_gemm_gflops(0, 1), Error);
  EXPECT_THROW(measure_gemm_gflops(16, 0), Error);
}

}  // namespace
}  // namespace saturate
