// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/html_report.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "testing/error_of.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(HtmlReport, NoInputCanCloseAScriptEarly) {
  ReportAssets assets;
  assets.d3_js = "var d3 = {re: /</g, s: '</script>'};";  // as library code can contain
  assets.c3_js = "var c3 = {};";
  assets.c3_css = ".c3 {}";
  nlohmann::json input = {{"kind", "run"}, {"title", "a </script><b>title"}, {"source", "x"},
                          {"findings", nlohmann::json::array()}, {"context", {{"host", "</STYLE>"}}}};
  const std::string html = html_report(input, assets);
  // d3, c3, the data and the drawing script: four elements, four closing tags.
  EXPECT_EQ(count(html, "<script"), 4);
  EXPECT_EQ(count(html, "</script>"), 4);
  EXPECT_EQ(count(html, "</style>"), 1);
  EXPECT_NE(html.find("/</g"), std::string::npos) << "a '</' that closes nothing is left alone";
  EXPECT_NE(html.find("<title>a &lt;/script&gt;&lt;b&gt;title</title>"), std::string::npos);
}

TEST(HtmlReport, ReadsPlansAndRunsAndNamesBadFiles) {
  testing::TempDir tmp;
  std::ofstream(tmp.file("steps.jsonl"))
      << "{\"type\": \"step\", \"step\": 0, \"samples\": 64, \"step_ms\": 10, \"data_wait_ms\": 4,"
         " \"forward_ms\": 6, \"loss\": 2.0}\n"
      << "{\"type\": \"device_sample\", \"t_ms\": 5}\n"
      << "{\"type\": \"step\", \"step\": 1, \"samples\": 64, \"step_ms\": 10, \"data_wait_ms\": 4,"
         " \"forward_ms\": 6, \"loss\": 1.5}\n";
  const nlohmann::json run = read_report_input(tmp.file("steps.jsonl"));
  EXPECT_EQ(run["kind"], "run");
  EXPECT_EQ(run["steps"].size(), 2u);
  ASSERT_FALSE(run["findings"].empty());  // 40% data wait
  EXPECT_EQ(run["findings"][0]["rule"], "input-bound");

  std::ofstream(tmp.file("plan.json"))
      << R"({"model": "mlp", "data": "d", "device": "cpu", "config": {"batch_size": 96},
            "stages": [], "trials": [{"config": {"batch_size": 96, "precision": "fp32"},
            "outcome": "oom"}], "baseline": {}, "tuned": {}, "memory_limit_bytes": 1000})";
  const nlohmann::json plan = read_report_input(tmp.file("plan.json"));
  EXPECT_EQ(plan["kind"], "plan");
  EXPECT_EQ(plan["trials"][0]["fits"], false);
  EXPECT_EQ(plan["chosen"]["batch_size"], 96);

  std::ofstream(tmp.file("bad.jsonl")) << "{\"type\": \"step\", \"step\": 0, \"step_ms\": 1, "
                                          "\"loss\": 1}\n{\"type\": \"step\", \"step\": 1}\n";
  EXPECT_NE(testing::error_of([&] { read_report_input(tmp.file("bad.jsonl")); })
                .find(tmp.file("bad.jsonl") + ": line 2"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { read_report_input(tmp.file("none.json")); })
                .find(tmp.file("none.json")),
            std::string::npos);
}

TEST(HtmlReport, MissingChartLibraryNamesTheFileAndPackage) {
  testing::TempDir tmp;
  setenv("SATURATE_JS_DIR", tmp.path().c_str(), 1);
  const std::string e = testing::error_of([] { load_report_assets(); });
  unsetenv("SATURATE_JS_DIR");
  EXPECT_NE(e.find(tmp.path() + "/d3/d3.min.js"), std::string::npos) << e;
  EXPECT_NE(e.find("libjs-d3"), std::string::npos) << e;
}

}  // namespace
}  // namespace saturate
