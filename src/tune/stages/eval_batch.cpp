// SPDX-License-Identifier: Apache-2.0
// Stage "eval_batch": evaluation keeps no activations for a backward pass, so it fits far
// larger batches than training; the largest that is safe with the training state resident and
// within eval_tolerance of the fastest is taken (larger batches evaluate in fewer passes, but on
// a CPU throughput often falls past the caches).
#include <algorithm>
#include <sstream>

#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "tune_state.h"

namespace saturate::tune_detail {
namespace {

struct Point {
  int64_t batch;
  EvalTrial t;
};

// Doubling from the training micro-batch up to the validation split, or the user's batch alone.
std::vector<int64_t> candidates_for(const TuneState& s) {
  const int64_t split = s.o.eval_samples;
  if (!s.o.tune_eval_batch) return {s.current.train.eval_batch_size};
  std::vector<int64_t> out;
  for (int64_t b = std::max<int64_t>(1, s.current.micro_batch()); b > 0; b *= 2) {
    out.push_back(std::min(b, std::max<int64_t>(1, split)));
    if (b >= split) break;
  }
  return out;
}

// Measures the candidates in order until one does not fit or would take too long; false when
// the runner cannot evaluate.
bool measure_points(TuneState& s, std::vector<Point>& points, std::ostringstream& tried) {
  // A candidate may take at most a twentieth of the budget (of a minute without one).
  const double cap_s = s.o.budget_s > 0 ? s.o.budget_s / 20.0 : 60.0;
  for (int64_t b : candidates_for(s)) {
    s.check_stop();
    if (!points.empty()) {
      const double predicted_s = static_cast<double>((1 + s.o.eval_batches) * b) /
                                 std::max(1e-9, points.back().t.samples_per_s);
      if (predicted_s > cap_s || s.search_time_spent()) {
        tried << "; stopped before " << b << " (about " << format_fixed(predicted_s, 1) << " s)";
        return true;
      }
    }
    const EvalTrial t = s.runner.evaluate(s.current, b, s.o.eval_batches);
    if (!t.measured) return false;
    const bool ok = t.fits && t.peak_memory_bytes <= s.target_bytes();
    tried << (tried.tellp() > 0 ? ", " : "") << b << ": "
          << (t.fits ? format_fixed(t.samples_per_s, 1) + " samples/s, peak " +
                           format_bytes(t.peak_memory_bytes)
                     : std::string("out of memory"))
          << (t.fits && !ok ? " (over the limit less reserve)" : "");
    if (!ok) return true;
    points.push_back({b, t});
  }
  return true;
}

}  // namespace

void eval_batch(TuneState& s) {
  const double sps_now = TuneState::sps(s.current_out);
  const int64_t user = s.current.train.eval_batch_size;
  std::vector<Point> points;
  std::ostringstream tried;
  if (s.o.eval_samples <= 0 || !measure_points(s, points, tried)) {
    s.finish_stage("eval_batch", sps_now, sps_now, false,
                   "no validation split to measure evaluation on: kept batch " +
                       std::to_string(user));
    return;
  }
  int64_t chosen = 0;
  double fastest = 0;
  for (const Point& pt : points) fastest = std::max(fastest, pt.t.samples_per_s);
  for (const Point& pt : points)
    if (pt.t.samples_per_s >= fastest * (1.0 - s.o.eval_tolerance)) chosen = pt.batch;
  std::string why;
  if (chosen == 0) {
    // Not even the first candidate evaluates under the limit: the smallest batch is the
    // safest there is, and the final check reports what training itself peaks at.
    chosen = std::min<int64_t>(user, std::max<int64_t>(1, s.current.micro_batch()));
    why = tried.str() + ": nothing measured fits; evaluation batch " + std::to_string(chosen);
  } else {
    why = "inference mode with the training state resident: " + tried.str() + ": batch " +
          std::to_string(chosen) +
          (s.o.tune_eval_batch
               ? std::string(", the largest within ") + pct(s.o.eval_tolerance) + " of the fastest"
               : std::string(" (your --eval-batch-size) fits"));
  }
  s.set_eval_batch(chosen);
  s.plan.eval_samples_per_s = 0;
  for (const Point& pt : points)
    if (pt.batch == chosen) {
      s.plan.eval_samples_per_s = pt.t.samples_per_s;
      s.plan.eval_peak_memory_bytes = pt.t.peak_memory_bytes;
    }
  s.finish_stage("eval_batch", sps_now, sps_now, chosen != user, why);
}

}  // namespace saturate::tune_detail
