// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/json.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "saturate/core/atomic_file.h"

namespace saturate {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SATURATE_CHECK(in.good(), path, ": cannot open: ", std::strerror(errno));
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return nlohmann::json::parse(buf.str());
  } catch (const nlohmann::json::parse_error& e) {
    SATURATE_CHECK(false, path, ": not valid JSON (byte ", e.byte, ")");
  }
  return {};
}

void write_json_file(const std::string& path, const nlohmann::json& value) {
  const std::string why = write_file_atomically(path, value.dump(2) + "\n");
  SATURATE_CHECK(why.empty(), path, ": cannot write: ", why);
}

}  // namespace saturate
