// SPDX-License-Identifier: Apache-2.0
#pragma once
// The HTML report: one self-contained file that works offline, with charts drawn by c3 on d3
// (Debian's libjs-c3 and libjs-d3, inlined into the file when it is written).
//
//   const ReportAssets assets = load_report_assets();
//   write_text_file("report.html", html_report(read_report_input("plan.json"), assets));

#include <string>

#include <nlohmann/json.hpp>

namespace saturate {

/// The charting library's files, read from disk.
struct ReportAssets {
  std::string d3_js, c3_js, c3_css;
};

/// Reads d3 and c3 from $SATURATE_JS_DIR or /usr/share/javascript (d3/d3.min.js,
/// c3/c3.min.js, c3/c3.min.css). Throws saturate::Error naming the missing file and the Debian
/// package that provides it.
ReportAssets load_report_assets();

/// The report's data from a plan (saturate tune's plan.json) or a run (the steps.jsonl of
/// --logdir): {"kind": "plan"|"run", "source", ...}. Throws saturate::Error "report: PATH: ..."
/// for a missing, malformed or unrecognised file, naming the line of a bad JSONL record.
nlohmann::json read_report_input(const std::string& path);

/// The whole HTML document: the data as JSON, the inlined charting library, and the script that
/// draws the stages, throughput and memory against batch size (OOM boundary and chosen point),
/// the step breakdown, the loss curves and the findings. `</` in embedded text is escaped so no
/// input can close a script element.
std::string html_report(const nlohmann::json& input, const ReportAssets& assets);

}  // namespace saturate
