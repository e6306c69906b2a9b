// SPDX-License-Identifier: Apache-2.0
#pragma once
// Findings (diagnose/diagnose.h) as an indented block for the terminal, as profile, tune and
// doctor print them.
//
//   print_findings(std::cout, diagnose(facts));

#include <iosfwd>
#include <vector>

#include "saturate/diagnose/diagnose.h"

namespace saturate {

/// "  findings:" and, per finding, "    [severity] title" and "      → recommendation";
/// "  findings: none (no rule fired)" when empty.
void print_findings(std::ostream& os, const std::vector<Finding>& findings);

}  // namespace saturate
