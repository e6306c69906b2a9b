// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/batch_iterator.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "saturate/core/error.h"

namespace saturate {
namespace {

// SplitMix64 finaliser: spreads (seed, epoch) over the whole 64-bit seed space so that nearby
// seeds and epochs give unrelated generator states.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform integer in [0, bound) by rejection. std::uniform_int_distribution is not used because
// its algorithm is implementation-defined, which would make the order differ across libraries.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = std::mt19937_64::max() - std::mt19937_64::max() % bound;
  uint64_t r = rng();
  while (r >= limit) r = rng();
  return r % bound;
}

}  // namespace

BatchIterator::BatchIterator(const TensorDataset& data, BatchIteratorOptions options)
    : inputs_(data.inputs), targets_(data.targets), options_(options) {
  SATURATE_CHECK(options_.batch_size > 0, "data: batch size must be positive, got ",
                 options_.batch_size);
  SATURATE_CHECK(std::isfinite(options_.normalize_std) && options_.normalize_std > 0.0,
                 "data: normalize_std must be a positive finite number, got ",
                 options_.normalize_std);
  SATURATE_CHECK(std::isfinite(options_.normalize_mean),
                 "data: normalize_mean must be finite, got ", options_.normalize_mean);
  SATURATE_CHECK(inputs_.defined() && targets_.defined(), "data: dataset '", data.name,
                 "' has no tensors (was it loaded?)");
  // Token windows: int64 [N, T] ids with int64 [N, T] next-token targets.
  tokens_ = inputs_.scalar_type() == at::kLong && inputs_.dim() == 2;
  SATURATE_CHECK(tokens_ || (inputs_.scalar_type() == at::kByte && inputs_.dim() >= 2),
                 "data: dataset '", data.name, "': inputs must be uint8 [N, ...] or int64 [N, T] ",
                 "tokens, got ", inputs_.scalar_type(), " ", inputs_.sizes());
  SATURATE_CHECK(targets_.scalar_type() == at::kLong &&
                     (tokens_ ? targets_.sizes() == inputs_.sizes() : targets_.dim() == 1) &&
                     targets_.size(0) == inputs_.size(0),
                 "data: dataset '", data.name, "': targets must be int64 [", inputs_.size(0),
                 tokens_ ? ", T]" : "]", ", got ", targets_.scalar_type(), " ", targets_.sizes());
  start_epoch(0);
}

void BatchIterator::start_epoch(int64_t epoch) {
  SATURATE_CHECK(epoch >= 0, "data: epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
  cursor_ = 0;
  order_.resize(static_cast<size_t>(inputs_.size(0)));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!options_.shuffle) return;
  std::mt19937_64 rng(mix64(options_.seed ^ mix64(static_cast<uint64_t>(epoch))));
  for (size_t i = order_.size(); i > 1; --i) {
    std::swap(order_[i - 1], order_[uniform_below(rng, i)]);
  }
}

void BatchIterator::seek(int64_t epoch, int64_t batch) {
  start_epoch(epoch);
  SATURATE_CHECK(batch >= 0 && batch <= batches_per_epoch(), "data: cannot seek to batch ", batch,
                 " of an epoch of ", batches_per_epoch());
  cursor_ = batch * options_.batch_size;
}

int64_t BatchIterator::batches_per_epoch() const {
  const int64_t n = static_cast<int64_t>(order_.size());
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::optional<Batch> BatchIterator::next() {
  const int64_t n = static_cast<int64_t>(order_.size());
  const int64_t end = options_.drop_last ? batches_per_epoch() * options_.batch_size : n;
  if (cursor_ >= end) return std::nullopt;
  const int64_t size = std::min(options_.batch_size, end - cursor_);
  const at::Tensor index =
      torch::from_blob(order_.data() + cursor_, {size}, torch::kInt64).to(inputs_.device());
  cursor_ += size;

  Batch batch;
  batch.size = size;
  batch.targets = targets_.index_select(0, index);
  if (tokens_) {
    batch.inputs = inputs_.index_select(0, index);
    return batch;
  }
  batch.inputs = inputs_.index_select(0, index)
                     .to(torch::kFloat32)
                     .div_(255.0)
                     .sub_(options_.normalize_mean)
                     .div_(options_.normalize_std);
  return batch;
}

}  // namespace saturate
