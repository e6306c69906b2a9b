// SPDX-License-Identifier: Apache-2.0
#pragma once
// Loader: the parallel input pipeline. A seeded sampler (shuffled per epoch, sharded by
// rank/world, optional drop-last) hands whole batches to a pool of worker threads; each worker
// reads its samples from a SampleSource (through an optional decoded-sample cache), applies the
// per-sample transforms (random crop, flip, normalise — seeded by sample and epoch, so the
// output does not depend on the number of workers) and collates straight into one of a ring of
// reused batch buffers (pinned when the batches go to a GPU). next() returns batches in order.
//
//   LoaderOptions o;  o.batch_size = 256;  o.workers = 4;
//   Loader loader(*source, o);
//   trainer.fit(loader, splits);     // its wait in next() is the step's data-wait phase

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "saturate/data/batch_source.h"
#include "saturate/data/sample_source.h"

namespace saturate {

namespace detail {
class DeviceCopier;
}

struct TransformOptions {
  int64_t crop = 0;        ///< random crop to crop × crop (0: none), after `pad` zero pixels a side
  int64_t pad = 0;
  bool flip = false;       ///< random horizontal flip
  double mean = 0.0;       ///< output = (pixel / 255 − mean) / std
  double std = 1.0;
  bool random = true;      ///< false: centre crop and no flip (evaluation)
};

/// The batches a Loader with `prefetch` and `workers` makes ahead: prefetch, but at least one
/// per worker (and at least one).
inline int loader_batches_ahead(int prefetch, int workers) {
  return std::max({1, prefetch, workers});
}

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  int rank = 0;   ///< this process's shard…
  int world = 1;  ///< …of this many; each gets ceil(size / world) samples (the order wraps)
  int workers = 0;   ///< threads making batches; 0 makes them on the caller's thread
  int prefetch = 2;  ///< batches made ahead of the consumer (at least 1)
  /// What the Loader makes ahead: prefetch, but at least one batch per worker.
  int batches_ahead() const { return loader_batches_ahead(prefetch, workers); }
  bool pin_memory = false;  ///< page-locked batch buffers (for asynchronous copies to a GPU)
  /// >= 0: next() returns batches already on this GPU, copied on a side stream that the
  /// device's current stream waits on (implies pin_memory); -1 keeps them on the host.
  int cuda_device = -1;
  int64_t cache_bytes = 0;  ///< keep up to this many bytes of read samples in memory
  TransformOptions transform;
};

struct LoaderStats {
  int64_t samples = 0;        ///< samples in batches made (cache hits included)
  int64_t cache_hits = 0;
  double worker_busy_s = 0;   ///< summed over workers (or the caller with 0 workers)
  double wait_s = 0;          ///< the consumer's time blocked in next()
  double cache_hit_rate() const { return samples ? static_cast<double>(cache_hits) / samples : 0; }
};

class Loader : public BatchSource {
 public:
  /// `source` must outlive the loader. Throws saturate::Error for impossible options (batch
  /// size, shard, crop larger than the padded image, …), naming the option.
  Loader(const SampleSource& source, LoaderOptions options);
  /// Stops the workers (mid-epoch too) and joins them.
  ~Loader() override;
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Starts `epoch` (the constructor starts epoch 0). Starting the current epoch again before
  /// any of its batches was taken keeps the batches already made.
  void start_epoch(int64_t epoch) override;
  /// Starts `epoch` at its batch `batch` without making the batches before it.
  void seek(int64_t epoch, int64_t batch) override;
  /// The next batch in order. Its tensors are the loader's buffers: valid until the next call
  /// to next() or start_epoch(). A worker's failure is rethrown here, at its batch, as
  /// saturate::Error naming the sample index and the source.
  std::optional<Batch> next() override;
  int64_t batches_per_epoch() const override;

  /// Samples of this shard per epoch.
  int64_t samples_per_epoch() const { return static_cast<int64_t>(order_.size()); }
  /// {C, H, W} of the batches (after cropping); {T} for token windows.
  std::vector<int64_t> output_shape() const;
  LoaderStats stats() const;
  const LoaderOptions& options() const { return o_; }
  /// The sample indices of batch `k` of the current epoch (tests).
  std::vector<int64_t> batch_indices(int64_t k) const;

 private:
  struct Slot;
  struct Cache;
  void worker_loop();
  void fill(Slot& slot, int64_t batch, int64_t epoch);
  void fill_images(Slot& slot, int64_t begin, int64_t size, int64_t epoch, int64_t generation);
  void fill_tokens(Slot& slot, int64_t begin, int64_t size, int64_t epoch, int64_t generation);
  uint64_t sample_draw(int64_t epoch, int64_t index) const;
  void check_current(int64_t generation);  // throws when the fill's epoch is gone
  void stop_workers_activity();

  const SampleSource& source_;
  LoaderOptions o_;
  bool tokens_ = false;  // text: int64 [B, T] token windows and next-token targets
  std::vector<int64_t> order_;  // this epoch's sample indices for this shard
  int64_t epoch_ = 0;
  bool started_ = false;  // start_epoch has run once
  int64_t batches_ = 0;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unique_ptr<Cache> cache_;
  std::unique_ptr<detail::DeviceCopier> copier_;

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;   // workers wait for claimable batches
  std::condition_variable ready_cv_;  // the consumer waits for its batch
  bool stop_ = false;
  int64_t generation_ = 0;  // bumps at every start_epoch; stale fills are dropped
  int64_t next_claim_ = 0;  // next batch a worker may take
  int64_t handed_out_ = 0;  // batches returned by next() this epoch
  int busy_ = 0;            // workers filling a slot
  std::vector<std::thread> threads_;

  std::atomic<int64_t> samples_{0}, cache_hits_{0};
  std::atomic<int64_t> busy_ns_{0};
  double wait_s_ = 0;
};

}  // namespace saturate
