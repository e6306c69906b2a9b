// SPDX-License-Identifier: Apache-2.0
#pragma once
// JSON files for configs, plans and summaries (nlohmann::json), with errors that name the file
// and the field.
//
//   nlohmann::json plan = saturate::read_json_file("plan.json");
//   int64_t b = saturate::json_get<int64_t>(plan["config"], "batch_size", "plan.json: config");

#include <string>

#include <nlohmann/json.hpp>

#include "saturate/core/error.h"

namespace saturate {

/// Reads and parses a JSON file. Throws saturate::Error naming the file when it is missing,
/// unreadable or malformed (with the parser's byte offset).
nlohmann::json read_json_file(const std::string& path);
/// Writes `value` pretty-printed, atomically (temporary file + rename) so a failure never
/// leaves a half-written file. Throws saturate::Error naming the file when it cannot be written.
void write_json_file(const std::string& path, const nlohmann::json& value);

/// `obj[key]` converted to T; throws saturate::Error "<where>.<key>: expected <type>, got ..."
/// when the type does not match. Returns `fallback` when the key is absent.
template <typename T>
T json_get(const nlohmann::json& obj, const std::string& key, const std::string& where,
           const T& fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    SATURATE_CHECK(false, where, ".", key, ": unexpected value ", it->dump());
  }
  return fallback;
}

}  // namespace saturate
