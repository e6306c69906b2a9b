// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small learnable image dataset for tests: class k has a bright 7x7 square at the k-th place
// of a grid, on noise. A few dozen steps of any reasonable model learn it.

#include <cstdint>

#include "saturate/data/dataset.h"

namespace saturate::testing {

/// `n` samples of 1x28x28 uint8 images in `classes` (<= 16) classes, deterministic in `seed`.
TensorDataset make_pattern_dataset(int64_t n, int64_t classes, uint64_t seed);
/// Train and test splits of make_pattern_dataset with normalisation filled in.
DatasetSplits make_pattern_splits(int64_t n_train, int64_t n_test, int64_t classes = 4);

}  // namespace saturate::testing
