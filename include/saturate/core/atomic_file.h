// SPDX-License-Identifier: Apache-2.0
#pragma once
// write_file_atomically: a file appears whole or not at all. The bytes go to PATH.tmp.PID beside
// it, are flushed to disk, and the temporary file is renamed over PATH; a run killed at any point
// leaves either the previous file or the new one, never half of one.
//
//   const std::string why = write_file_atomically(path, {{header.data(), header.size()},
//                                                        {body.data(), body.size()}});
//   SATURATE_CHECK_RUN(why.empty(), "data: cannot write ", path, ": ", why);

#include <cstddef>
#include <string>
#include <vector>

namespace saturate {

/// One run of bytes to write.
struct ByteRun {
  const void* data = nullptr;
  size_t size = 0;
};

/// Writes the runs in order to `path` atomically (temporary file, write loop, fsync, rename).
/// Returns "" on success, else the reason ("No space left on device"); on failure the
/// temporary file is removed and `path` is untouched. Each caller words its own error.
std::string write_file_atomically(const std::string& path, const std::vector<ByteRun>& runs);

/// The same for one string.
std::string write_file_atomically(const std::string& path, const std::string& text);

}  // namespace saturate
