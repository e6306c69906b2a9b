// SPDX-License-Identifier: Apache-2.0
#include "train_target.h"

#include <cmath>

#include <CLI/CLI.hpp>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/train/train_options.h"
#include "saturate/train/trainer.h"

namespace saturate::cli {

void add_target_flag(CLI::App& app, std::string& target) {
  app.add_option("--target", target,
                 "stop at a quality and report the time to it: val_accuracy=0.89 (at or above), "
                 "val_loss=0.3 or loss=0.2 (at or below)");
}

void apply_target(const std::string& text, double val_fraction, TrainOptions& o) {
  if (text.empty()) return;
  const size_t eq = text.find('=');
  SATURATE_CHECK(eq != std::string::npos, "train: --target must be METRIC=VALUE (for example "
                 "val_accuracy=0.89), got '", text, "'");
  const std::string metric = text.substr(0, eq), value = text.substr(eq + 1);
  check_target_metric(metric);
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SATURATE_CHECK(used == value.size() && !value.empty() && std::isfinite(v), "train: --target ",
                 metric, ": '", value, "' is not a number");
  const bool validation = metric.rfind("val_", 0) == 0;
  SATURATE_CHECK(!validation || o.evaluate, "train: --target ", metric, " needs evaluation, "
                 "which --no-eval turns off");
  SATURATE_CHECK(!validation || val_fraction > 0, "train: --target ", metric, " needs a "
                 "validation split: give --val-fraction (e.g. 0.05)");
  o.target_metric = metric;
  o.target_value = v;
}

}  // namespace saturate::cli
