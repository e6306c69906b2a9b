// SPDX-License-Identifier: Apache-2.0
#pragma once
// CRC-32C (Castagnoli), the checksum of TFRecord/TensorBoard event files and of checkpoint
// manifests. Uses the SSE4.2 crc32 instruction where the CPU has it (GB/s, so checksumming a
// checkpoint costs little next to writing it), a table otherwise; both give the same value.
//
//   uint32_t c = saturate::crc32c(bytes.data(), bytes.size());
//   c = saturate::crc32c_extend(c, more.data(), more.size());  // the CRC of bytes + more

#include <cstddef>
#include <cstdint>

namespace saturate {

/// CRC-32C of `size` bytes ("123456789" → 0xE3069283).
uint32_t crc32c(const void* data, size_t size);
/// The CRC-32C of the bytes `crc` covered followed by these `size` bytes.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace saturate
