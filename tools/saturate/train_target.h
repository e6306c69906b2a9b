// SPDX-License-Identifier: Apache-2.0
#pragma once
// `train --target METRIC=VALUE`: stop once a quality is reached and report what it took.

#include <string>

namespace CLI {
class App;
}

namespace saturate {
struct TrainOptions;
}

namespace saturate::cli {

void add_target_flag(CLI::App& app, std::string& target);

/// Parses `text` (empty: no target) into `options`. saturate::Error (exit 2) for an unknown
/// metric, a value that is not a number, a validation target without evaluation or without a
/// validation split (`val_fraction` 0).
void apply_target(const std::string& text, double val_fraction, TrainOptions& options);

}  // namespace saturate::cli
