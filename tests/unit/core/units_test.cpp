// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/units.h"

#include <gtest/gtest.h>

#include "saturate/core/error.h"

namespace saturate {

TEST(ParseBytes, ReadsBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_bytes("1048576", "--x"), 1048576);
  EXPECT_EQ(parse_bytes("2GiB", "--x"), 2LL << 30);
  EXPECT_EQ(parse_bytes("2G", "--x"), 2LL << 30);
  EXPECT_EQ(parse_bytes("512MB", "--x"), 512000000);
  EXPECT_EQ(parse_bytes("1.5KiB", "--x"), 1536);
  EXPECT_EQ(parse_bytes("3 mib", "--x"), 3LL << 20);
}

TEST(ParseBytes, RejectsGarbageZeroAndNegativeNamingTheFlag) {
  for (const char* bad : {"", "abc", "2XB", "-1G", "0", "1.2.3G", "0.1B"}) {
    try {
      parse_bytes(bad, "--memory-limit");
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--memory-limit"), std::string::npos) << e.what();
    }
  }
}

TEST(ParseDuration, ReadsSecondsMinutesHoursAndMilliseconds) {
  EXPECT_EQ(parse_duration_s("90", "--x"), 90.0);
  EXPECT_EQ(parse_duration_s("30s", "--x"), 30.0);
  EXPECT_EQ(parse_duration_s("10min", "--x"), 600.0);
  EXPECT_EQ(parse_duration_s("10m", "--x"), 600.0);
  EXPECT_EQ(parse_duration_s("1.5h", "--x"), 5400.0);
  EXPECT_EQ(parse_duration_s("250ms", "--x"), 0.25);
  for (const char* bad : {"", "min", "10 years", "-5s", "0s", "1.2.3s"}) {
    try {
      parse_duration_s(bad, "--checkpoint-interval");
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--checkpoint-interval"), std::string::npos) << e.what();
    }
  }
}

TEST(FormatBytes, PicksTheLargestUnitBelow1024) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(2LL << 30), "2.00 GiB");
}

TEST(FormatDuration, ScalesFromMillisecondsToHours) {
  EXPECT_EQ(format_duration_s(0.25), "250 ms");
  EXPECT_EQ(format_duration_s(12.34), "12.3 s");
  EXPECT_EQ(format_duration_s(245), "4 min 05 s");
  EXPECT_EQ(format_duration_s(3720), "1 h 02 min");
  EXPECT_EQ(format_duration_s(-1), "--");
}

}  // namespace saturate
