// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/units.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "saturate/core/error.h"

namespace saturate {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// "1.5 GiB" -> {1.5, "gib"}: the leading decimal number and the lower-case unit after it
// (spaces between them skipped). Throws saturate::Error with `bad` when there is no number.
std::pair<double, std::string> number_and_unit(const std::string& text, const std::string& bad) {
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.'))
    ++pos;
  SATURATE_CHECK(pos > 0, bad);
  char* end = nullptr;
  const std::string number = text.substr(0, pos);
  const double value = std::strtod(number.c_str(), &end);
  SATURATE_CHECK(end && *end == '\0', bad);
  std::string unit = lower(text.substr(pos));
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  return {value, unit};
}

}  // namespace

int64_t parse_bytes(const std::string& text, const std::string& what) {
  const std::string bad = detail::concat(what, ": cannot read '", text,
                                         "' as a size; expected e.g. 2GiB, 512MB or 1048576");
  const auto [value, unit] = number_and_unit(text, bad);
  double mult = 1.0;
  if (unit.empty() || unit == "b") {
    mult = 1.0;
  } else {
    static const char* kPrefixes = "kmgt";
    const char* p = std::strchr(kPrefixes, unit[0]);
    SATURATE_CHECK(p != nullptr, bad);
    const int power = static_cast<int>(p - kPrefixes) + 1;
    const std::string rest = unit.substr(1);
    if (rest.empty() || rest == "ib") {
      mult = std::pow(1024.0, power);  // "2G" means GiB, as memory limits usually do.
    } else if (rest == "b") {
      mult = std::pow(1000.0, power);
    } else {
      SATURATE_CHECK(false, bad);
    }
  }
  const double bytes = value * mult;
  SATURATE_CHECK(bytes >= 1.0, what, ": size must be positive, got '", text, "'");
  SATURATE_CHECK(bytes < 9.0e18, what, ": size '", text, "' is too large");
  return static_cast<int64_t>(std::llround(bytes));
}

double parse_duration_s(const std::string& text, const std::string& what) {
  const std::string bad = detail::concat(what, ": cannot read '", text,
                                         "' as a duration; expected e.g. 10min, 30s, 1.5h or 500ms");
  const auto [value, unit] = number_and_unit(text, bad);
  double mult = 0;
  if (unit.empty() || unit == "s" || unit == "sec") mult = 1;
  if (unit == "ms") mult = 1e-3;
  if (unit == "m" || unit == "min") mult = 60;
  if (unit == "h") mult = 3600;
  SATURATE_CHECK(mult > 0, bad);
  const double seconds = value * mult;
  SATURATE_CHECK(seconds > 0, what, ": duration must be positive, got '", text, "'");
  SATURATE_CHECK(seconds < 1e9, what, ": duration '", text, "' is too long");
  return seconds;
}

std::string format_fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, value);
  return buf;
}

std::string format_bytes(int64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return std::to_string(bytes) + " B";
  return format_fixed(v, 2) + " " + kUnits[u];
}

std::string format_duration_s(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  if (seconds < 1.0) return format_fixed(seconds * 1000.0, 0) + " ms";
  if (seconds < 60.0) return format_fixed(seconds, 1) + " s";
  char buf[64];
  const auto total = static_cast<int64_t>(std::llround(seconds));
  if (total < 3600) {
    std::snprintf(buf, sizeof(buf), "%lld min %02lld s", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld h %02lld min", static_cast<long long>(total / 3600),
                  static_cast<long long>((total % 3600) / 60));
  }
  return buf;
}

}  // namespace saturate
