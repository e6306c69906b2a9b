// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private: a whole file's bytes through POSIX calls (LibTorch wheels export broken copies of the
// std::filesystem functions; see dataset.cpp). Torch-free, so the fuzz targets compile it too.

#include <cstdint>
#include <string>
#include <vector>

namespace saturate::detail {

/// Throws saturate::Error "<component>: <path>: cannot open|read: <reason>" (or "not a regular
/// file") when the file cannot be read whole.
std::vector<uint8_t> read_file_bytes(const std::string& path, const char* component);

}  // namespace saturate::detail
