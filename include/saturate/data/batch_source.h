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
  /// Rewinds to `epoch` and skips its first `batch` batches, so that next() returns the batch
  /// an uninterrupted run would (a resumed run continues mid-epoch). The default skips by
  /// calling next(); sources that can jump there override it.
  virtual void seek(int64_t epoch, int64_t batch) {
    start_epoch(epoch);
    for (int64_t i = 0; i < batch; ++i) next();
  }
  /// Batches next() yields per epoch.
  virtual int64_t batches_per_epoch() const = 0;
};

}  // namespace saturate
