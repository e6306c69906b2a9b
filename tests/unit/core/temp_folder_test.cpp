// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/temp_folder.h"

#include <sys/stat.h>

#include <cstdio>

#include <gtest/gtest.h>

#include "testing/error_of.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

bool is_folder(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

TEST(MakeFolders, MakesEveryMissingFolderAboveAndIsFineWithExistingOnes) {
  testing::TempDir dir;
  const std::string deep = dir.file("runs/a/b");
  make_folders(deep, "test");
  EXPECT_TRUE(is_folder(deep));
  make_folders(deep, "test");  // again: nothing to do, no error
  make_parent_folders(dir.file("out/x/plan.json"), "test");
  EXPECT_TRUE(is_folder(dir.file("out/x")));
  EXPECT_FALSE(is_folder(dir.file("out/x/plan.json")));
  make_parent_folders("plan.json", "test");  // a bare name: the working folder
}

TEST(MakeFolders, AFileInTheWayIsNamedInTheError) {
  testing::TempDir dir;
  const std::string file = dir.file("afile");
  std::fclose(std::fopen(file.c_str(), "w"));
  const std::string e = testing::error_of([&] { make_folders(file + "/runs/a", "--logdir"); });
  EXPECT_NE(e.find("--logdir: cannot create '" + file + "/runs/a': '" + file + "'"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("a file of that name is in the way"), std::string::npos) << e;
  const std::string denied = testing::error_of([] { make_folders("/proc/no-such/x", "--out"); });
  EXPECT_NE(denied.find("--out: cannot create '/proc/no-such/x': '/proc/no-such'"),
            std::string::npos)
      << denied;
}

}  // namespace
}  // namespace saturate
