// SPDX-License-Identifier: Apache-2.0
#pragma once
// A temporary folder for a test, removed with everything in it when the object goes away.

#include <string>

namespace saturate::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  /// path() + "/" + name
  std::string file(const std::string& name) const;

 private:
  std::string path_;
};

/// Folder of the generated test fixtures (TorchScript .pt files); see tests/CMakeLists.txt.
std::string fixtures_dir();

}  // namespace saturate::testing
