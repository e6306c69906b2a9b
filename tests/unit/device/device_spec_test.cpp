// SPDX-License-Identifier: Apache-2.0
#include "saturate/device/device_spec.h"

#include <gtest/gtest.h>

#include <string>

#include "saturate/core/error.h"

namespace saturate {
namespace {

std::string parse_error(const std::string& text) {
  try {
    DeviceSpec::parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceSpec, ParsesAuto) {
  const auto s = DeviceSpec::parse("auto");
  EXPECT_EQ(s.kind, DeviceKind::kAuto);
  EXPECT_EQ(s.index, -1);
}

TEST(DeviceSpec, ParsesCpu) {
  const auto s = DeviceSpec::parse("cpu");
  EXPECT_EQ(s.kind, DeviceKind::kCpu);
  EXPECT_EQ(s.index, -1);
}

TEST(DeviceSpec, ParsesCudaWithoutIndexAsUnspecified) {
  const auto s = DeviceSpec::parse("cuda");
  EXPECT_EQ(s.kind, DeviceKind::kCuda);
  EXPECT_EQ(s.index, -1);
}

TEST(DeviceSpec, ParsesCudaWithIndex) {
  EXPECT_EQ(DeviceSpec::parse("cuda:0").index, 0);
  const auto s = DeviceSpec::parse("cuda:12");
  EXPECT_EQ(s.kind, DeviceKind::kCuda);
  EXPECT_EQ(s.index, 12);
}

TEST(DeviceSpec, IgnoresSurroundingWhitespace) {
  EXPECT_EQ(DeviceSpec::parse(" cuda:1\n").index, 1);
}

TEST(DeviceSpec, ToStringRoundTrips) {
  for (const char* text : {"auto", "cpu", "cuda", "cuda:0", "cuda:3"}) {
    EXPECT_EQ(DeviceSpec::parse(text).to_string(), text);
  }
  EXPECT_EQ(DeviceSpec{}.to_string(), "auto");
}

TEST(DeviceSpec, RejectsUnknownNameListingTheForms) {
  const std::string msg = parse_error("tpu");
  EXPECT_NE(msg.find("device: unknown device 'tpu'; expected auto, cpu, cuda or cuda:N"),
            std::string::npos)
      << msg;
}

TEST(DeviceSpec, SuggestsClosestName) {
  EXPECT_NE(parse_error("cdua").find("did you mean 'cuda'?"), std::string::npos);
  EXPECT_NE(parse_error("CPU").find("did you mean 'cpu'?"), std::string::npos);
  EXPECT_NE(parse_error("gpu").find("did you mean 'cuda'?"), std::string::npos);
  EXPECT_NE(parse_error("Cuda:0").find("did you mean 'cuda:0'?"), std::string::npos);
}

TEST(DeviceSpec, RejectsNegativeIndex) {
  const std::string msg = parse_error("cuda:-1");
  EXPECT_NE(msg.find("device: unknown device 'cuda:-1'; expected auto, cpu, cuda or cuda:N"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("'-1' is not a CUDA device number"), std::string::npos) << msg;
}

TEST(DeviceSpec, RejectsNonNumericIndex) {
  EXPECT_NE(parse_error("cuda:x").find("'x' is not a CUDA device number"), std::string::npos);
  EXPECT_NE(parse_error("cuda:").find("'' is not a CUDA device number"), std::string::npos);
  for (const char* text : {"cuda:1x", "cuda:+1", "cuda: 1", "cuda:99999999999"}) {
    EXPECT_NE(parse_error(text).find("is not a CUDA device number"), std::string::npos) << text;
  }
}

TEST(DeviceSpec, RejectsEmptyAndOtherForms) {
  for (const char* text : {"", "cpu:0", "cuda0", "auto:1", "mps"}) {
    EXPECT_NE(parse_error(text).find("device: "), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace saturate
