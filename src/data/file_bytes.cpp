// SPDX-License-Identifier: Apache-2.0
#include "data/file_bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "saturate/core/error.h"

namespace saturate::detail {

std::vector<uint8_t> read_file_bytes(const std::string& path, const char* component) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SATURATE_CHECK(fd >= 0, component, ": ", path, ": cannot open: ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    const int err = errno;
    ::close(fd);
    SATURATE_CHECK(false, component, ": ", path, ": ",
                   err != 0 ? std::strerror(err) : "not a regular file");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      SATURATE_CHECK(false, component, ": ", path, ": cannot read: ",
                     n == 0 ? "file shrank while reading" : std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return bytes;
}

}  // namespace saturate::detail
