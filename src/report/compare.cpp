// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/compare.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/core/json.h"
#include "saturate/core/units.h"

namespace saturate {
namespace {

using detail::concat;
using json = nlohmann::json;

// Without per-window rates or a stated spread there is nothing to measure the noise by; this
// band is what identical configs drifted by between separate runs on the project's noisy CI
// machines (bench/RESULTS.md).
constexpr double kUnknownNoiseBandPct = 10.0;
// A final training loss this much higher (relative) is a regression: short runs' loss moves a
// few percent with thread timing alone.
constexpr double kLossTolerancePct = 10.0;

double number_or(const json& obj, const char* key, double fallback, const std::string& where) {
  return json_get<double>(obj, key, where, fallback);
}

std::string text_or(const json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return "?";
  if (it->is_string()) return it->get<std::string>();
  SATURATE_CHECK(it->is_number(), where, ".", key, ": expected a string or number, got ",
                 it->type_name());
  return it->dump();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double pct_change(double a, double b) { return a != 0 ? 100.0 * (b - a) / a : 0.0; }

}  // namespace

RunMetrics run_metrics_from_json(const json& j, const std::string& path) {
  const std::string where = "compare: " + path;
  SATURATE_CHECK(j.is_object(), where, ": expected a JSON object");
  RunMetrics m;
  m.path = path;
  if (j.contains("tuned") && j.contains("config")) {
    m.kind = "plan";
    const json& config = j["config"];
    SATURATE_CHECK(config.is_object() && j["tuned"].is_object(), where,
                   ": config and tuned must be objects");
    const json& tuned = j["tuned"];
    m.samples_per_s = number_or(tuned, "samples_per_s", -1, where + ": tuned");
    const double spread = number_or(tuned, "spread", -1, where + ": tuned");
    m.spread_pct = spread >= 0 ? 100.0 * spread : -1;  // plans store a fraction
    m.peak_memory_bytes = json_get<int64_t>(tuned, "peak_memory_bytes", where + ": tuned", -1);
    // The guard's held-out validation split, not the test split.
    const double accuracy = number_or(tuned, "validation_metric", -1, where + ": tuned");
    m.val_accuracy = accuracy >= 0 ? 100.0 * accuracy : -1;
    m.final_loss = number_or(tuned, "final_loss", -1, where + ": tuned");
    m.workload = concat(text_or(j, "model", where), " on ", text_or(j, "data", where), ", ",
                        text_or(j, "device", where), ", batch ",
                        text_or(config, "batch_size", where), ", ",
                        text_or(config, "precision", where));
  } else if (j.contains("final_loss") && j.contains("samples_per_s")) {
    // Before the profile test: a train summary has phases_ms too (a profile has no final loss).
    m.kind = "train";
    m.samples_per_s = number_or(j, "samples_per_s", -1, where);
    m.final_loss = number_or(j, "final_loss", -1, where);
    const double accuracy = number_or(j, "test_accuracy", -1, where);
    m.test_accuracy = accuracy >= 0 ? 100.0 * accuracy : -1;
    const double val = number_or(j, "val_accuracy", -1, where);
    m.val_accuracy = val >= 0 ? 100.0 * val : -1;
    if (j.contains("divergence") && j["divergence"].is_object())
      m.diverged = concat("at step ", text_or(j["divergence"], "step", where), ": ",
                          text_or(j["divergence"], "reason", where));
    m.peak_memory_bytes = json_get<int64_t>(j, "peak_memory_bytes", where, -1);
    m.workload = concat(text_or(j, "model", where), " on ", text_or(j, "data", where), ", ",
                        text_or(j, "device", where), ", batch ", text_or(j, "batch_size", where),
                        ", ", text_or(j, "precision", where));
    if (j.contains("target") && j["target"].is_object()) {
      const json& t = j["target"];
      m.target = concat(text_or(t, "metric", where), "=", text_or(t, "value", where));
      if (t.value("reached", false)) m.time_to_target_s = number_or(t, "train_s", -1, where);
    }
  } else if (j.contains("phases_ms") && j.contains("samples_per_s")) {
    m.kind = "profile";
    m.samples_per_s = number_or(j, "samples_per_s", -1, where);
    m.spread_pct = number_or(j, "samples_per_s_spread_pct", -1, where);
    m.step_ms = number_or(j, "step_ms", -1, where);
    m.peak_memory_bytes = json_get<int64_t>(j, "peak_memory_bytes", where, -1);
    if (j.contains("window_samples_per_s")) {
      const json& w = j["window_samples_per_s"];
      SATURATE_CHECK(w.is_array(), where, ": window_samples_per_s: expected an array");
      for (const json& x : w) {
        SATURATE_CHECK(x.is_number(), where, ": window_samples_per_s: expected numbers, got ",
                       x.type_name());
        m.window_samples_per_s.push_back(x.get<double>());
      }
    }
    m.workload = concat(text_or(j, "model", where), " on ", text_or(j, "data", where), ", ",
                        text_or(j, "device", where), ", batch ", text_or(j, "batch_size", where),
                        ", ", text_or(j, "precision", where));
  } else {
    SATURATE_CHECK(false, where,
                   ": not a profile (saturate profile --json), plan (saturate tune) or train "
                   "summary (saturate train --summary-json)");
  }
  SATURATE_CHECK(m.samples_per_s > 0, where, ": samples_per_s must be a positive number");
  return m;
}

RunMetrics read_run_metrics(const std::string& path) {
  json j;
  try {
    j = read_json_file(path);
  } catch (const Error& e) {
    throw Error(concat("compare: ", e.what()));
  }
  return run_metrics_from_json(j, path);
}

std::string to_string(Verdict v) {
  switch (v) {
    case Verdict::kWithinNoise:
      return "within noise";
    case Verdict::kImprovement:
      return "improvement";
    case Verdict::kRegression:
      return "regression";
  }
  return "within noise";
}

double mann_whitney_p(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n1 = x.size(), n2 = y.size();
  if (n1 < 2 || n2 < 2) return 1.0;
  std::vector<std::pair<double, int>> all;
  for (double v : x) all.emplace_back(v, 0);
  for (double v : y) all.emplace_back(v, 1);
  std::sort(all.begin(), all.end());
  const size_t n = all.size();
  double rank_sum_x = 0, tie_term = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && all[j].first == all[i].first) ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // mean of ranks i+1 .. j
    for (size_t k = i; k < j; ++k)
      if (all[k].second == 0) rank_sum_x += rank;
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    i = j;
  }
  const double N1 = static_cast<double>(n1), N2 = static_cast<double>(n2),
               N = static_cast<double>(n);
  const double u = rank_sum_x - N1 * (N1 + 1) / 2;
  const double mean = N1 * N2 / 2;
  const double var = N1 * N2 / 12 * ((N + 1) - tie_term / (N * (N - 1)));
  if (var <= 0) return 1.0;
  const double z = std::max(0.0, std::fabs(u - mean) - 0.5) / std::sqrt(var);
  return std::erfc(z / std::sqrt(2.0));
}

bool Comparison::has_regression() const {
  return std::any_of(metrics.begin(), metrics.end(),
                     [](const MetricComparison& m) { return m.verdict == Verdict::kRegression; });
}

namespace {

// Throughput: higher is better. By the per-window rates when both runs have enough of them,
// else by the runs' stated spreads (or a fixed band without them).
MetricComparison compare_throughput(const RunMetrics& a, const RunMetrics& b,
                                    const CompareOptions& o) {
  MetricComparison m;
  m.name = "samples_per_s";
  m.a = a.samples_per_s;
  m.b = b.samples_per_s;
  m.delta_pct = pct_change(m.a, m.b);
  const size_t na = a.window_samples_per_s.size(), nb = b.window_samples_per_s.size();
  bool changed = false;
  if (na >= 5 && nb >= 5) {
    // The medians of the windows, so the verdict and the delta shown agree.
    const double ma = median(a.window_samples_per_s), mb = median(b.window_samples_per_s);
    m.delta_pct = pct_change(ma, mb);
    const double p = mann_whitney_p(a.window_samples_per_s, b.window_samples_per_s);
    changed = p < o.alpha && std::fabs(m.delta_pct) >= o.min_change_pct;
    m.basis = concat("Mann-Whitney U over ", na, " + ", nb, " windows: p ",
                     p < 1e-4 ? std::string("< 0.0001") : "= " + format_fixed(p, 4),
                     ", median change ", format_fixed(m.delta_pct, 1), "% (counts when p < ",
                     format_fixed(o.alpha, 2), " and |change| >= ",
                     format_fixed(o.min_change_pct, 1), "%)");
  } else {
    double band = kUnknownNoiseBandPct;
    std::string why = "no spread stated: a " + format_fixed(band, 0) + "% band";
    if (a.spread_pct >= 0 && b.spread_pct >= 0) {
      band = std::max(o.min_change_pct, a.spread_pct + b.spread_pct);
      why = concat("the two runs' spreads (", format_fixed(a.spread_pct, 1), "% + ",
                   format_fixed(b.spread_pct, 1), "%) give a ", format_fixed(band, 1),
                   "% band");
    }
    changed = std::fabs(m.delta_pct) > band;
    m.basis = why;
  }
  if (changed) m.verdict = m.delta_pct < 0 ? Verdict::kRegression : Verdict::kImprovement;
  return m;
}

// A metric judged by a tolerance on its change: `limit` above (below, when lower is better)
// is a regression, as far the other way an improvement.
MetricComparison compare_within(const char* name, double a, double b, double change,
                                double limit, bool lower_is_better, std::string basis) {
  MetricComparison m;
  m.name = name;
  m.a = a;
  m.b = b;
  m.delta_pct = pct_change(a, b);
  const double worse = lower_is_better ? change : -change;
  if (worse > limit) m.verdict = Verdict::kRegression;
  if (-worse > limit) m.verdict = Verdict::kImprovement;
  m.basis = std::move(basis);
  return m;
}

// Time to the same target: what the runs are for. Lower is better, judged like throughput's
// smallest change; a target one run reached and the other did not is said.
void add_time_to_target(const RunMetrics& a, const RunMetrics& b, const CompareOptions& o,
                        Comparison& c) {
  if (a.target.empty() || b.target.empty()) return;
  if (a.target != b.target) {
    c.notes.push_back(concat("different targets: ", a.target, " vs ", b.target));
    return;
  }
  if (a.time_to_target_s > 0 && b.time_to_target_s > 0) {
    c.metrics.push_back(compare_within(
        "time_to_target_s", a.time_to_target_s, b.time_to_target_s,
        pct_change(a.time_to_target_s, b.time_to_target_s), o.min_change_pct,
        /*lower_is_better=*/true,
        concat(a.target, ", tolerance ", format_fixed(o.min_change_pct, 1), "%")));
  } else if (a.time_to_target_s > 0 || b.time_to_target_s > 0) {
    c.notes.push_back(concat("only ", a.time_to_target_s > 0 ? a.path : b.path, " reached ",
                             a.target));
  }
}

// Quality, which a faster run must not lose: a run that diverged where the other did not,
// validation and test accuracy (points) and the final training loss (relative). A metric only
// one file has is named, not judged.
void add_quality(const RunMetrics& a, const RunMetrics& b, const CompareOptions& o,
                 Comparison& c) {
  std::vector<std::string> judged, one_sided;
  if (a.diverged.empty() != b.diverged.empty()) {
    MetricComparison m;
    m.name = "diverged";
    m.a = a.diverged.empty() ? 0 : 1;
    m.b = b.diverged.empty() ? 0 : 1;
    m.verdict = b.diverged.empty() ? Verdict::kImprovement : Verdict::kRegression;
    m.basis = concat(b.diverged.empty() ? "A" : "B", " diverged ",
                     b.diverged.empty() ? a.diverged : b.diverged);
    c.metrics.push_back(m);
    judged.push_back("divergence");
  }
  const std::string tolerance = concat("tolerance ", format_fixed(o.accuracy_tolerance_pts, 1),
                                       " points");
  auto accuracy = [&](const char* name, double va, double vb) {  // points, higher is better
    if (va >= 0 && vb >= 0) {
      c.metrics.push_back(compare_within(name, va, vb, vb - va, o.accuracy_tolerance_pts,
                                         /*lower_is_better=*/false, tolerance));
      judged.push_back(name);
    } else if (va >= 0 || vb >= 0) {
      one_sided.push_back(concat(name, " (only ", va >= 0 ? "A" : "B", " has it)"));
    }
  };
  accuracy("val_accuracy_pct", a.val_accuracy, b.val_accuracy);
  accuracy("test_accuracy_pct", a.test_accuracy, b.test_accuracy);
  if (a.final_loss > 0 && b.final_loss > 0) {  // lower is better
    c.metrics.push_back(compare_within("final_loss", a.final_loss, b.final_loss,
                                       pct_change(a.final_loss, b.final_loss), kLossTolerancePct,
                                       /*lower_is_better=*/true,
                                       concat("tolerance ", format_fixed(kLossTolerancePct, 0),
                                              "%")));
    judged.push_back("final_loss");
  } else if (a.final_loss > 0 || b.final_loss > 0) {
    one_sided.push_back(concat("final_loss (only ", a.final_loss > 0 ? "A" : "B", " has it)"));
  }
  std::string text;
  for (const std::string& n : judged) text += (text.empty() ? "" : ", ") + n;
  if (text.empty())
    text = a.kind == "profile" || b.kind == "profile"
               ? "none: a profile measures speed only"
               : "none: neither file has accuracy or loss";
  if (!one_sided.empty()) {
    text += "; not judged: ";
    for (size_t i = 0; i < one_sided.size(); ++i) text += (i ? ", " : "") + one_sided[i];
  }
  c.quality_judged = text;
}

}  // namespace

Comparison compare_runs(const RunMetrics& a, const RunMetrics& b, const CompareOptions& o) {
  Comparison c;
  if (a.workload != b.workload)
    c.notes.push_back(concat("different workloads: ", a.workload, " vs ", b.workload,
                             "; the deltas compare unlike runs"));
  c.metrics.push_back(compare_throughput(a, b, o));
  if (a.step_ms > 0 && b.step_ms > 0) {  // follows throughput; shown for the eye
    MetricComparison m;
    m.name = "step_ms";
    m.a = a.step_ms;
    m.b = b.step_ms;
    m.delta_pct = pct_change(m.a, m.b);
    m.verdict = c.metrics.front().verdict;
    m.basis = "judged with samples_per_s";
    c.metrics.push_back(m);
  }
  if (a.peak_memory_bytes > 0 && b.peak_memory_bytes > 0) {  // lower is better
    const double ma = static_cast<double>(a.peak_memory_bytes);
    const double mb = static_cast<double>(b.peak_memory_bytes);
    c.metrics.push_back(compare_within("peak_memory_bytes", ma, mb, pct_change(ma, mb),
                                       o.memory_tolerance_pct, /*lower_is_better=*/true,
                                       concat("tolerance ",
                                              format_fixed(o.memory_tolerance_pct, 1), "%")));
  }
  add_quality(a, b, o, c);
  add_time_to_target(a, b, o, c);
  return c;
}

}  // namespace saturate
