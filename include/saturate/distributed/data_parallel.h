// SPDX-License-Identifier: Apache-2.0
#pragma once
// Data parallelism with DistributedDataParallel's semantics, from C++: at attach, rank 0's
// parameters and buffers go to every rank; during each synchronised backward, gradients are
// averaged across ranks in buckets (about 25 MiB, the first 1 MiB) that c10d's Reducer
// all-reduces as soon as they fill, so communication overlaps the rest of backward; micro-batches
// before the last of a step accumulate locally and synchronise nothing; buffers (BatchNorm
// statistics) are rank 0's before every forward.
//
//   auto group = init_process_group(env, DistBackend::kAuto, device, timeout);
//   auto sync = make_data_parallel(*group);
//   Trainer trainer(*model, opts, device, memory.get(), sync.get());

#include <cstdint>
#include <memory>

#include "saturate/train/gradient_sync.h"

namespace saturate {

class DistGroup;

struct DataParallelOptions {
  int64_t bucket_bytes = int64_t{25} << 20;
  int64_t first_bucket_bytes = int64_t{1} << 20;
  bool broadcast_buffers = true;  ///< rank 0's buffers before every forward
  /// Reduce gradients even in a group of one (which otherwise synchronises nothing): for
  /// checking the bucket path on a machine with one GPU (scripts/gpu-check).
  bool reduce_alone = false;
};

/// `group` must outlive the result. A group of one rank gives a sync that does nothing, unless
/// `options.reduce_alone`.
std::unique_ptr<GradientSync> make_data_parallel(DistGroup& group,
                                                 const DataParallelOptions& options = {});

}  // namespace saturate
