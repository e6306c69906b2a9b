// SPDX-License-Identifier: Apache-2.0
// saturate report plan.json|steps.jsonl --html out.html: one self-contained HTML file with the
// tune's stages, throughput and memory against batch size, step breakdown, loss curves,
// findings and context, charted by the inlined c3/d3.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "command.h"
#include "saturate/core/atomic_file.h"
#include "saturate/core/error.h"
#include "saturate/report/html_report.h"

namespace saturate::cli {

int run_report(const std::vector<std::string>& args) {
  std::string input_path, html_path;
  CLI::App app{"Write a self-contained HTML report of a plan (saturate tune) or a run "
               "(the steps.jsonl of --logdir).",
               "saturate report"};
  app.add_option("INPUT", input_path, "plan.json or steps.jsonl")->required();
  app.add_option("--html", html_path, "the HTML file to write")->required();
  if (!parse_args(app, args)) return 0;
  check_writable(html_path, "--html");
  const nlohmann::json input = read_report_input(input_path);
  const std::string html = html_report(input, load_report_assets());
  // Written whole or not at all: a failure leaves no half report.
  const std::string why = write_file_atomically(html_path, html);
  SATURATE_CHECK(why.empty(), "report: cannot write ", html_path, ": ", why);
  std::cout << "saturate report: " << input_path << " (" << input.value("kind", std::string())
            << ") -> " << html_path << " (" << html.size() / 1024 << " KiB, works offline)\n";
  return 0;
}

}  // namespace saturate::cli
