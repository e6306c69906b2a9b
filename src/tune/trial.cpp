// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/trial.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "saturate/core/strings.h"

namespace saturate {

int64_t steps_for_timed(double min_timed_s, double samples_per_s, int64_t batch,
                        int64_t timed_steps, int64_t max_steps) {
  if (!(min_timed_s > 0) || !(samples_per_s > 0) || batch <= 0) return 0;
  const double step_s = static_cast<double>(batch) / samples_per_s;
  if (static_cast<double>(timed_steps) * step_s >= min_timed_s) return 0;
  const auto timed = static_cast<int64_t>(std::ceil(min_timed_s / step_s));
  return std::min(max_steps, 1 + timed);
}

std::string RunConfig::describe() const {
  std::ostringstream s;
  s << "batch " << train.batch_size;
  if (pipeline_stages > 1) {
    if (replicas() > 1) s << " per replica × " << replicas() << " replicas";
    s << ", " << pipeline_stages << " pipeline stages";
    if (micro_batches > 0) s << " × " << micro_batches << " micro-batches";
    s << " (" << pipeline_schedule;
    if (pipeline_split == "even") s << ", even split";
    else if (pipeline_split != "balanced") s << ", layers " << pipeline_split;
    s << ")";
    if (tensor_parallel > 1) s << " of " << tensor_parallel << "-way tensor parallel";
  } else if (tensor_parallel > 1) {
    if (replicas() > 1) s << " per replica × " << replicas() << " replicas";
    s << ", " << tensor_parallel << "-way tensor parallel";
  } else if (world_size > 1) {
    s << " per rank × " << world_size << " ranks";
  }
  s << ", " << to_string(train.precision);
  if (train.accumulate > 1) s << ", accumulate " << train.accumulate;
  if (train.recompute_segments > 0) s << ", recompute " << train.recompute_segments;
  if (train.memory_format != MemoryFormat::kContiguous) s << ", " << to_string(train.memory_format);
  if (threads > 0) s << ", " << count_of(threads, "thread");
  if (workers > 0) s << ", " << workers << " workers, prefetch " << prefetch;
  return s.str();
}

TrialOutcome CountingRunner::run(const TrialRequest& request) {
  TrialOutcome t = inner_.run(request);
  ++trials_;
  steps_ += t.steps_run;
  ooms_ += t.fits ? 0 : 1;
  return t;
}

}  // namespace saturate
