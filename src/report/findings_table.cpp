// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/findings_table.h"

#include <ostream>

namespace saturate {

void print_findings(std::ostream& os, const std::vector<Finding>& findings) {
  if (findings.empty()) {
    os << "  findings: none (no rule fired)\n";
    return;
  }
  os << "  findings:\n";
  for (const Finding& f : findings) {
    os << "    [" << to_string(f.severity) << "] " << f.title << "\n"
       << "      → " << f.recommendation << "\n";
  }
}

}  // namespace saturate
