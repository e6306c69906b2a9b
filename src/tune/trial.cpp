// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/trial.h"

#include <sstream>

namespace saturate {

std::string RunConfig::describe() const {
  std::ostringstream s;
  s << "batch " << train.batch_size;
  if (world_size > 1) s << " per rank × " << world_size << " ranks";
  s << ", " << to_string(train.precision);
  if (train.accumulate > 1) s << ", accumulate " << train.accumulate;
  if (train.recompute_segments > 0) s << ", recompute " << train.recompute_segments;
  if (train.memory_format != MemoryFormat::kContiguous) s << ", " << to_string(train.memory_format);
  if (threads > 0) s << ", " << threads << " threads";
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
