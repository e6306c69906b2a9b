// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/temp_folder.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "saturate/core/error.h"

namespace saturate {

TempFolder::TempFolder(const std::string& prefix, const char* component) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  SATURATE_CHECK(mkdtemp(buf.data()) != nullptr, component, ": cannot create a folder ",
                 pattern, ": ", std::strerror(errno));
  path_ = buf.data();
}

namespace {

// Removes `path` and what is in it, depth first, without following links; bounded by depth.
void remove_tree_at(const std::string& path, int depth) {
  if (DIR* d = opendir(path.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string child = path + "/" + name;
      struct stat st {};
      if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && depth < 16)
        remove_tree_at(child, depth + 1);
      else
        unlink(child.c_str());
    }
    closedir(d);
  }
  rmdir(path.c_str());
}

}  // namespace

void remove_tree(const std::string& path) { remove_tree_at(path, 0); }

void make_folders(const std::string& dir, const std::string& what) {
  if (dir.empty()) return;
  // Each prefix ending before a '/', then the whole path: a/b/c makes a, a/b, a/b/c.
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (::mkdir(prefix.c_str(), 0755) == 0) continue;
    const int err = errno;
    struct stat st {};
    SATURATE_CHECK(err == EEXIST && ::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
                   what, ": cannot create '", dir, "'",
                   prefix == dir ? std::string() : ": '" + prefix + "'", ": ",
                   err == EEXIST ? "a file of that name is in the way" : std::strerror(err));
  }
}

void make_parent_folders(const std::string& path, const std::string& what) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return;
  make_folders(path.substr(0, slash), what);
}

TempFolder::~TempFolder() { remove_tree(path_); }

}  // namespace saturate
