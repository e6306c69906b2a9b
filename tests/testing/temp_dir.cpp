// SPDX-License-Identifier: Apache-2.0
#include "testing/temp_dir.h"

#include <ftw.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace saturate::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/saturate-test-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a temporary folder");
  path_ = tmpl;
}

namespace {
int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return std::remove(path);
}
}  // namespace

// POSIX nftw rather than std::filesystem::remove_all: the torch wheel exports its own
// std::filesystem symbols, built against a newer libstdc++, and they crash with GCC 12's.
TempDir::~TempDir() { nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

std::string TempDir::file(const std::string& name) const { return path_ + "/" + name; }

std::string fixtures_dir() {
#ifdef SATURATE_TEST_FIXTURES_DIR
  return SATURATE_TEST_FIXTURES_DIR;
#else
  return "tests/fixtures";
#endif
}

}  // namespace saturate::testing
