// SPDX-License-Identifier: Apache-2.0
#pragma once
// Logging facade: levels, a replaceable sink, and macros that skip argument evaluation below the
// threshold. Logs and progress go to stderr by default; results never go through here.
//
//   SATURATE_LOG_INFO("tuner: batch ", b, " fits, ", mib, " MiB peak");
//   saturate::log::set_sink([](log::Level, const std::string& m) { captured.push_back(m); });

#include <functional>
#include <optional>
#include <string>

#include "saturate/core/error.h"

namespace saturate::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

using Sink = std::function<void(Level, const std::string&)>;

/// Messages below `level` are dropped before their arguments are evaluated. Default: kInfo.
void set_level(Level level);
Level level();
/// Parses "debug|info|warn|error|off"; nullopt for anything else.
std::optional<Level> parse_level(const std::string& name);
/// Replaces where messages go (default: spdlog's stderr logger). Pass nullptr to restore.
/// Not thread-safe against concurrent logging; set it at start-up.
void set_sink(Sink sink);
void write(Level level, const std::string& message);

inline bool enabled(Level l) { return static_cast<int>(l) >= static_cast<int>(level()); }

}  // namespace saturate::log

#define SATURATE_LOG_AT(lvl, ...)                                                  \
  do {                                                                             \
    if (::saturate::log::enabled(lvl))                                             \
      ::saturate::log::write(lvl, ::saturate::detail::concat(__VA_ARGS__));         \
  } while (0)
#define SATURATE_LOG_DEBUG(...) SATURATE_LOG_AT(::saturate::log::Level::kDebug, __VA_ARGS__)
#define SATURATE_LOG_INFO(...) SATURATE_LOG_AT(::saturate::log::Level::kInfo, __VA_ARGS__)
#define SATURATE_LOG_WARN(...) SATURATE_LOG_AT(::saturate::log::Level::kWarn, __VA_ARGS__)
#define SATURATE_LOG_ERROR(...) SATURATE_LOG_AT(::saturate::log::Level::kError, __VA_ARGS__)
