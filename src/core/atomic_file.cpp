// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace saturate {
namespace {

// Writes all n bytes; false with errno set when the disk refuses.
bool write_whole(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

std::string write_file_atomically(const std::string& path, const std::vector<ByteRun>& runs) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::strerror(errno);
  bool ok = true;
  for (const ByteRun& r : runs) {
    ok = write_whole(fd, r.data, r.size);
    if (!ok) break;
  }
  ok = ok && ::fsync(fd) == 0;
  int err = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (ok) return {};
  ::unlink(tmp.c_str());
  return std::strerror(err != 0 ? err : EIO);
}

std::string write_file_atomically(const std::string& path, const std::string& text) {
  return write_file_atomically(path, std::vector<ByteRun>{{text.data(), text.size()}});
}

}  // namespace saturate
