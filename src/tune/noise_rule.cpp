// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/noise_rule.h"

#include <cmath>

namespace saturate {

bool beats(double a_samples_per_s, double a_noise, double b_samples_per_s, double b_noise,
           double min_gain) {
  if (!(a_samples_per_s > 0)) return false;
  if (!(b_samples_per_s > 0)) return true;
  const double gain = a_samples_per_s / b_samples_per_s - 1.0;
  return gain >= min_gain && gain > kNoiseSigmas * std::hypot(a_noise, b_noise);
}

bool clearly_slower(double slower, double faster, double noise) {
  return slower < faster * (1.0 - kNoiseSigmas * noise);
}

}  // namespace saturate
