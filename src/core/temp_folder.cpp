// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/temp_folder.h"

#include <dirent.h>
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

TempFolder::~TempFolder() {
  if (DIR* d = opendir(path_.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") std::remove(file(name).c_str());
    }
    closedir(d);
  }
  rmdir(path_.c_str());
}

}  // namespace saturate
