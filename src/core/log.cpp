// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/log.h"

#include <atomic>
#include <memory>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace saturate::log {
namespace {

std::atomic<Level> g_level{Level::kInfo};

Sink& custom_sink() {
  static Sink sink;
  return sink;
}

std::shared_ptr<spdlog::logger> default_logger() {
  // One stderr logger for the process; the pattern is plain so it reads like a CLI's messages.
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("saturate");
    l->set_pattern("%^saturate: %l:%$ %v");
    l->set_level(spdlog::level::trace);
    return l;
  }();
  return logger;
}

}  // namespace

void set_level(Level level) { g_level.store(level); }
Level level() { return g_level.load(); }

std::optional<Level> parse_level(const std::string& name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn" || name == "warning") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  return std::nullopt;
}

void set_sink(Sink sink) { custom_sink() = std::move(sink); }

void write(Level level, const std::string& message) {
  if (!enabled(level)) return;
  if (custom_sink()) {
    custom_sink()(level, message);
    return;
  }
  switch (level) {
    case Level::kDebug: default_logger()->debug(message); break;
    case Level::kInfo: default_logger()->info(message); break;
    case Level::kWarn: default_logger()->warn(message); break;
    case Level::kError: default_logger()->error(message); break;
    case Level::kOff: break;
  }
}

}  // namespace saturate::log
