// SPDX-License-Identifier: Apache-2.0
#pragma once
// BatchIterator: single-threaded, in-process mini-batches over a TensorDataset, with a shuffle
// order that depends only on (seed, epoch), so runs are reproducible across machines.
//
//   BatchIteratorOptions opts;
//   opts.batch_size = 128;
//   opts.normalize_mean = splits.normalize_mean;
//   opts.normalize_std = splits.normalize_std;
//   BatchIterator it(splits.train, opts);
//   it.start_epoch(epoch);
//   while (auto batch = it.next()) train_step(batch->inputs, batch->targets);

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "saturate/data/batch_source.h"
#include "saturate/data/dataset.h"

namespace saturate {

struct BatchIteratorOptions {
  int64_t batch_size = 64;
  /// Visit samples in a seeded random order each epoch; otherwise in dataset order.
  bool shuffle = true;
  /// Skip the final batch when it would be smaller than batch_size.
  bool drop_last = false;
  uint64_t seed = 0;
  /// Usually DatasetSplits::normalize_mean / normalize_std (statistics of pixels in [0, 1]).
  double normalize_mean = 0.0;
  double normalize_std = 1.0;
};

class BatchIterator : public BatchSource {
 public:
  /// Keeps its own handles to the dataset's tensors (no copy of the data; `data` may go away).
  /// Starts at epoch 0. Throws saturate::Error when batch_size <= 0, normalize_std is not a
  /// positive finite number, normalize_mean is not finite, or `data` is neither uint8 [N, ...]
  /// inputs with int64 [N] targets nor int64 [N, T] token windows with int64 [N, T] targets
  /// (which pass through unnormalised).
  BatchIterator(const TensorDataset& data, BatchIteratorOptions options);

  /// Rewinds to the start of `epoch` (>= 0). With shuffle, the order is a fixed function of
  /// (seed, epoch): std::mt19937_64 driving an explicit Fisher-Yates, identical on every platform.
  void start_epoch(int64_t epoch) override;
  void seek(int64_t epoch, int64_t batch) override;
  /// The next batch of this epoch, or nullopt once the epoch is exhausted.
  std::optional<Batch> next() override;
  /// Batches next() yields per epoch: ceil(N / batch_size), or floor with drop_last.
  int64_t batches_per_epoch() const override;
  /// This epoch's sample order: a permutation of 0..N-1.
  const std::vector<int64_t>& order() const { return order_; }
  int64_t epoch() const { return epoch_; }

 private:
  at::Tensor inputs_;
  at::Tensor targets_;
  bool tokens_ = false;  // int64 [N, T] token windows, passed through unnormalised
  BatchIteratorOptions options_;
  std::vector<int64_t> order_;
  int64_t epoch_ = 0;
  int64_t cursor_ = 0;  // position in order_ of the next batch's first sample
};

}  // namespace saturate
