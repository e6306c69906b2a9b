// SPDX-License-Identifier: Apache-2.0
#pragma once
// BatchSource: where a trainer's batches come from — the in-process BatchIterator today, the
// parallel loader later, a deliberately slow source in tests. The time a trainer spends in
// next() is the step's data-wait phase.
//
//   BatchIterator it(splits.train, opts);
//   trainer.fit(it, splits);

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

namespace saturate {

/// One mini-batch on the host.
struct Batch {
  at::Tensor inputs;   ///< float32 [B, C, H, W]: (pixel / 255 - normalize_mean) / normalize_std
  at::Tensor targets;  ///< int64 [B]
  int64_t size = 0;    ///< B; smaller than batch_size only for the last batch without drop_last
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// Rewinds to the start of `epoch` (>= 0).
  virtual void start_epoch(int64_t epoch) = 0;
  /// The next batch of this epoch, or nullopt once the epoch is exhausted.
  virtual std::optional<Batch> next() = 0;
  /// Batches next() yields per epoch.
  virtual int64_t batches_per_epoch() const = 0;
};

}  // namespace saturate
