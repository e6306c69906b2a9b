// SPDX-License-Identifier: Apache-2.0
#pragma once
// Quantities as text and back: byte sizes ("2GiB", "512MB", "1048576"), durations and rates,
// formatted the way reports and progress lines print them.
//
//   int64_t limit = saturate::parse_bytes("2GiB", "--memory-limit");   // 2147483648
//   saturate::format_bytes(limit);                                      // "2.00 GiB"

#include <cstdint>
#include <string>

namespace saturate {

/// Parses a byte size: an integer or decimal number with an optional unit (B, K/KB/KiB, M/MB/MiB,
/// G/GB/GiB, T/TB/TiB; case-insensitive; decimal units are powers of 1000, binary of 1024).
/// Throws saturate::Error naming `what` (e.g. "--memory-limit") on anything else or a value <= 0.
int64_t parse_bytes(const std::string& text, const std::string& what);

/// Parses a duration: a number with a unit (ms, s, min, h; "90" alone is seconds), e.g. "10min",
/// "30s", "1.5h". Throws saturate::Error naming `what` on anything else or a value <= 0.
double parse_duration_s(const std::string& text, const std::string& what);

/// "512 B", "1.50 KiB", "2.00 GiB".
std::string format_bytes(int64_t bytes);
/// "850 ms", "12.3 s", "4 min 05 s", "1 h 02 min".
std::string format_duration_s(double seconds);
/// Fixed-point with `digits` decimals.
std::string format_fixed(double value, int digits);

}  // namespace saturate
