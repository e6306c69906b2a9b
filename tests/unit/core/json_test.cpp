// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/json.h"

#include <fstream>

#include <gtest/gtest.h>

#include "testing/temp_dir.h"

namespace saturate {

TEST(JsonFile, RoundTripsAndFieldsConvert) {
  testing::TempDir dir;
  write_json_file(dir.file("a.json"), {{"config", {{"batch_size", 128}}}});
  auto j = read_json_file(dir.file("a.json"));
  EXPECT_EQ(json_get<int64_t>(j["config"], "batch_size", "a.json: config", 0), 128);
  EXPECT_EQ(json_get<int64_t>(j["config"], "missing", "a.json: config", 7), 7);
}

TEST(JsonFile, MalformedFileIsAnErrorNamingTheFile) {
  testing::TempDir dir;
  std::ofstream(dir.file("bad.json")) << "{\"a\": [1, 2";
  try {
    read_json_file(dir.file("bad.json"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json: not valid JSON"), std::string::npos);
  }
  EXPECT_THROW(read_json_file(dir.file("absent.json")), Error);
}

TEST(JsonFile, WrongFieldTypeNamesTheField) {
  nlohmann::json j = {{"batch_size", "large"}};
  try {
    json_get<int64_t>(j, "batch_size", "plan.json: config", 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plan.json: config.batch_size"), std::string::npos);
  }
}

TEST(JsonFile, UnwritablePathIsAnErrorAndLeavesNothing) {
  EXPECT_THROW(write_json_file("/proc/no-such-dir/x.json", {{"a", 1}}), Error);
}

}  // namespace saturate
