// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/json.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

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
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    SATURATE_CHECK(out.good(), path, ": cannot write: ", std::strerror(errno));
    out << value.dump(2) << "\n";
    out.flush();
    SATURATE_CHECK(out.good(), path, ": write failed: ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    SATURATE_CHECK(false, path, ": cannot write: ", std::strerror(err));
  }
}

}  // namespace saturate
