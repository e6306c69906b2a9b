// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/atomic_file.h"

#include <dirent.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing/temp_dir.h"

namespace saturate {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

TEST(AtomicFile, WritesTheRunsInOrderAndReplacesAnOldFile) {
  testing::TempDir dir;
  const std::string path = dir.file("out.bin");
  std::ofstream(path) << "the old, longer contents";
  const std::string a = "head:", b = "body";
  EXPECT_EQ(write_file_atomically(path, {{a.data(), a.size()}, {b.data(), b.size()}}), "");
  EXPECT_EQ(read_text(path), "head:body");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.bin"}) << "a temporary file is left";
}

TEST(AtomicFile, AFailedRenameLeavesWhatWasThereAndNoTemporaryFile) {
  // A folder with a file in it stands at the path: the bytes are written, the rename fails.
  testing::TempDir dir;
  const std::string path = dir.file("taken");
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  std::ofstream(path + "/keep") << "kept";
  const std::string why = write_file_atomically(path, std::string("new contents"));
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(read_text(path + "/keep"), "kept");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"taken"}) << "a temporary file is left";
}

TEST(AtomicFile, AMissingFolderGivesTheReason) {
  const std::string why = write_file_atomically("/proc/no-such-dir/out.json", std::string("{}"));
  EXPECT_NE(why.find("No such file"), std::string::npos) << why;
}

}  // namespace
}  // namespace saturate
