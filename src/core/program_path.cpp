// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/program_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "saturate/core/error.h"

namespace saturate {

std::string resolve_program(const std::string& name, const char* component) {
  SATURATE_CHECK(!name.empty(), component, ": the command is empty");
  if (name.find('/') != std::string::npos) {
    SATURATE_CHECK(access(name.c_str(), X_OK) == 0, component, ": cannot run '", name, "': ",
                   std::strerror(errno));
    return name;
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  SATURATE_CHECK(false, component, ": '", name, "' is not a file and not found in PATH");
  return name;
}

}  // namespace saturate
