// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/loader.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include <torch/torch.h>

#include "data/device_copy.h"
#include "saturate/core/error.h"

namespace saturate {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Thrown inside a fill that start_epoch() or the destructor made pointless.
struct Abandoned {};

// One sample's geometry: C × H × W pixels in, C × OH × OW floats out, (pixel / 255 − mean) / std
// as pixel × scale + shift.
struct SampleShape {
  int64_t C, H, W, OH, OW;
  float scale, shift;
};

// Writes `src` (uint8 C × H × W) to `dst` (float C × OH × OW): padded by t.pad zero pixels a
// side, cropped at offsets drawn from `r` (the centre when !t.random), flipped when t.flip and
// r says so, normalised.
void transform_sample(const uint8_t* src, float* dst, const SampleShape& s,
                      const TransformOptions& t, uint64_t r) {
  const int64_t C = s.C, H = s.H, W = s.W, OH = s.OH, OW = s.OW;
  int64_t oy = t.pad, ox = t.pad;  // offsets into the padded image
  if (t.crop > 0) {
    const int64_t span_y = H + 2 * t.pad - OH, span_x = W + 2 * t.pad - OW;
    oy = t.random ? static_cast<int64_t>(r % static_cast<uint64_t>(span_y + 1)) : span_y / 2;
    ox = t.random ? static_cast<int64_t>((r >> 20) % static_cast<uint64_t>(span_x + 1))
                  : span_x / 2;
  }
  const bool flip = t.flip && t.random && ((r >> 40) & 1);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t y = 0; y < OH; ++y) {
      const int64_t sy = y + oy - t.pad;
      float* row = dst + (c * OH + y) * OW;
      if (sy < 0 || sy >= H) {
        std::fill(row, row + OW, s.shift);
        continue;
      }
      const uint8_t* srow = src + (c * H + sy) * W;
      for (int64_t x = 0; x < OW; ++x) {
        const int64_t sx = (flip ? OW - 1 - x : x) + ox - t.pad;
        row[x] = sx < 0 || sx >= W ? s.shift : static_cast<float>(srow[sx]) * s.scale + s.shift;
      }
    }
  }
}

}  // namespace

struct Loader::Slot {
  enum class State { kFree, kFilling, kReady, kFailed };
  at::Tensor inputs, targets;
  State state = State::kFree;
  int64_t batch = -1;       // which batch of the epoch it holds
  int64_t generation = -1;  // of which epoch start
  int64_t size = 0;
  std::string error;
};

// Read samples with index < capacity, kept as read: a flat buffer and a state per index
// (0 empty, 1 being written, 2 full), so lookups take no lock.
struct Loader::Cache {
  Cache(int64_t capacity, int64_t sample_bytes)
      : capacity(capacity), bytes(sample_bytes),
        pixels(static_cast<size_t>(capacity * sample_bytes)), labels(capacity),
        state(static_cast<size_t>(capacity)) {}
  int64_t capacity, bytes;
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  std::vector<std::atomic<uint8_t>> state;
};

Loader::Loader(const SampleSource& source, LoaderOptions options)
    : source_(source), o_(std::move(options)) {
  SATURATE_CHECK(o_.batch_size > 0, "loader: --batch-size must be positive, got ", o_.batch_size);
  SATURATE_CHECK(o_.world >= 1 && o_.rank >= 0 && o_.rank < o_.world, "loader: rank ", o_.rank,
                 " is not in [0, world ", o_.world, ")");
  SATURATE_CHECK(o_.workers >= 0 && o_.workers <= 256, "loader: --workers must be in [0, 256], got ",
                 o_.workers);
  SATURATE_CHECK(o_.prefetch >= 1 && o_.prefetch <= 64, "loader: --prefetch must be in [1, 64], got ",
                 o_.prefetch);
  SATURATE_CHECK(o_.cache_bytes >= 0, "loader: --cache must not be negative");
  const TransformOptions& t = o_.transform;
  SATURATE_CHECK(std::isfinite(t.mean) && std::isfinite(t.std) && t.std > 0,
                 "loader: normalisation needs a finite mean and a positive std");
  const std::vector<int64_t> shape = source_.sample_shape();
  tokens_ = source_.is_token_source();
  if (tokens_) {
    SATURATE_CHECK(shape.size() == 1 && shape[0] >= 1, "loader: ", source_.describe(),
                   " does not give token windows");
    SATURATE_CHECK(t.crop == 0 && t.pad == 0 && !t.flip,
                   "loader: --crop, --pad and --flip are for images, not text");
  }
  SATURATE_CHECK(tokens_ || shape.size() == 3, "loader: ", source_.describe(),
                 " does not give C×H×W samples");
  // Images only: a token window's shape has one dimension, so shape[1] and shape[2] are not
  // there to read (reading them was undefined, and now and then failed a text run here).
  if (!tokens_) {
    SATURATE_CHECK(t.pad >= 0, "loader: crop padding must not be negative");
    SATURATE_CHECK(t.crop >= 0 && t.crop <= std::min(shape[1], shape[2]) + 2 * t.pad,
                   "loader: crop ", t.crop, " is larger than the padded ", shape[1] + 2 * t.pad,
                   "x", shape[2] + 2 * t.pad, " images of ", source_.describe());
  }
  // Token windows come from a memory-mapped cache already: nothing to keep.
  if (!tokens_ && o_.cache_bytes >= source_.sample_bytes()) {
    const int64_t capacity = std::min(source_.size(), o_.cache_bytes / source_.sample_bytes());
    cache_ = std::make_unique<Cache>(capacity, source_.sample_bytes());
  }
  // Buffers: one per batch in flight, plus the one the consumer holds.
  if (o_.cuda_device >= 0) o_.pin_memory = true;
  const bool pin = o_.pin_memory && torch::cuda::is_available();
  const int ahead = o_.batches_ahead();
  const std::vector<int64_t> out = output_shape();
  for (int i = 0; i < ahead + 1; ++i) {
    auto slot = std::make_unique<Slot>();
    const auto options = at::TensorOptions().pinned_memory(pin);
    if (tokens_) {  // token ids in, next-token ids out: int64 [B, T] both
      slot->inputs = at::empty({o_.batch_size, out[0]}, options.dtype(at::kLong));
      slot->targets = at::empty({o_.batch_size, out[0]}, options.dtype(at::kLong));
    } else {
      slot->inputs = at::empty({o_.batch_size, out[0], out[1], out[2]}, options.dtype(at::kFloat));
      slot->targets = at::empty({o_.batch_size}, options.dtype(at::kLong));
    }
    slots_.push_back(std::move(slot));
  }
  if (o_.cuda_device >= 0)
    copier_ = detail::make_device_copier(o_.cuda_device, static_cast<int>(slots_.size()));
  start_epoch(0);
  for (int i = 0; i < o_.workers; ++i) threads_.emplace_back([this] { worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::vector<int64_t> Loader::output_shape() const {
  const std::vector<int64_t> s = source_.sample_shape();
  if (!tokens_ && o_.transform.crop > 0) return {s[0], o_.transform.crop, o_.transform.crop};
  return s;
}

int64_t Loader::batches_per_epoch() const { return batches_; }

std::vector<int64_t> Loader::batch_indices(int64_t k) const {
  SATURATE_CHECK(k >= 0 && k < batches_, "loader: batch ", k, " is not in this epoch");
  const auto begin = order_.begin() + k * o_.batch_size;
  const auto end = order_.begin() + std::min<int64_t>(order_.size(), (k + 1) * o_.batch_size);
  return {begin, end};
}

LoaderStats Loader::stats() const {
  LoaderStats s;
  s.samples = samples_.load();
  s.cache_hits = cache_hits_.load();
  s.worker_busy_s = static_cast<double>(busy_ns_.load()) * 1e-9;
  std::lock_guard<std::mutex> lock(mutex_);
  s.wait_s = wait_s_;
  return s;
}

void Loader::start_epoch(int64_t epoch) { seek(epoch, 0); }

void Loader::seek(int64_t epoch, int64_t batch) {
  SATURATE_CHECK(epoch >= 0, "loader: epoch must not be negative, got ", epoch);
  SATURATE_CHECK(batch >= 0, "loader: batch must not be negative, got ", batch);
  std::unique_lock<std::mutex> lock(mutex_);
  // The epoch already started and nothing taken from it (the constructor starts epoch 0, and a
  // trainer starts it again): its batches made so far are the ones asked for, so keep them.
  if (started_ && epoch == epoch_ && handed_out_ == 0 && batch == 0) return;
  started_ = true;
  // Fills in progress belong to the old epoch: they stop at their next sample and are dropped.
  ++generation_;
  ready_cv_.wait(lock, [&] { return busy_ == 0 || stop_; });
  epoch_ = epoch;
  const int64_t n = source_.size();
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  if (o_.shuffle) {
    std::mt19937_64 rng(splitmix64(o_.seed ^ splitmix64(static_cast<uint64_t>(epoch))));
    for (int64_t i = n - 1; i > 0; --i) {
      std::uniform_int_distribution<int64_t> pick(0, i);
      std::swap(all[i], all[pick(rng)]);
    }
  }
  order_.clear();
  // Every rank gets ceil(n / world) samples, so all ranks take the same number of steps (a
  // rank with one batch fewer would leave the others waiting in their gradient all-reduce): the
  // shuffled order is padded by wrapping around to its first samples, which a few ranks then
  // see twice this epoch. The union of the shards is the whole dataset.
  const int64_t padded = (n + o_.world - 1) / o_.world * o_.world;
  for (int64_t i = o_.rank; i < padded; i += o_.world) order_.push_back(all[i % n]);
  const auto count = static_cast<int64_t>(order_.size());
  batches_ = o_.drop_last ? count / o_.batch_size : (count + o_.batch_size - 1) / o_.batch_size;
  if (o_.drop_last) order_.resize(static_cast<size_t>(batches_ * o_.batch_size));
  for (auto& s : slots_) {
    s->state = Slot::State::kFree;
    s->batch = -1;
  }
  SATURATE_CHECK(batch <= batches_, "loader: cannot seek to batch ", batch, " of epoch ", epoch,
                 ", which has ", batches_);
  // Workers start at `batch`: the slot of batch k is k % slots whatever the start.
  next_claim_ = batch;
  handed_out_ = batch;
  lock.unlock();
  work_cv_.notify_all();
}

void Loader::worker_loop() {
  const auto ahead = static_cast<int64_t>(slots_.size()) - 1;
  while (true) {
    std::unique_lock<std::mutex> lock(mutex_);
    work_cv_.wait(lock, [&] {
      return stop_ || (next_claim_ < batches_ && next_claim_ < handed_out_ + ahead);
    });
    if (stop_) return;
    const int64_t k = next_claim_++;
    const int64_t generation = generation_;
    const int64_t epoch = epoch_;
    Slot& slot = *slots_[static_cast<size_t>(k % static_cast<int64_t>(slots_.size()))];
    slot.state = Slot::State::kFilling;
    ++busy_;
    lock.unlock();

    Slot::State result = Slot::State::kReady;
    std::string error;
    try {
      fill(slot, k, epoch);
    } catch (const Abandoned&) {
      result = Slot::State::kFree;
    } catch (const std::exception& e) {
      result = Slot::State::kFailed;
      error = e.what();
    }
    lock.lock();
    --busy_;
    if (generation == generation_ && result != Slot::State::kFree) {
      slot.state = result;
      slot.batch = k;
      slot.generation = generation;
      slot.error = error;
    } else {
      slot.state = Slot::State::kFree;
    }
    lock.unlock();
    ready_cv_.notify_all();
  }
}

void Loader::fill(Slot& slot, int64_t k, int64_t epoch) {
  const auto t0 = Clock::now();
  // The buffer's previous batch may still be on its way to the GPU.
  if (copier_) copier_->wait(static_cast<int>(k % static_cast<int64_t>(slots_.size())));
  const int64_t generation = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    return generation_;
  }();
  const int64_t begin = k * o_.batch_size;
  const int64_t size = std::min<int64_t>(o_.batch_size, static_cast<int64_t>(order_.size()) - begin);
  if (tokens_) {
    fill_tokens(slot, begin, size, epoch, generation);
  } else {
    fill_images(slot, begin, size, epoch, generation);
  }
  slot.size = size;
  samples_.fetch_add(size, std::memory_order_relaxed);
  busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count(),
                     std::memory_order_relaxed);
}

// Per-sample randomness from (seed, epoch, index): the same whichever worker runs it.
uint64_t Loader::sample_draw(int64_t epoch, int64_t index) const {
  return splitmix64(o_.seed ^ splitmix64(static_cast<uint64_t>(epoch) * 1000003ULL +
                                         static_cast<uint64_t>(index)));
}

void Loader::check_current(int64_t generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stop_ || generation != generation_) throw Abandoned{};
}

void Loader::fill_tokens(Slot& slot, int64_t begin, int64_t size, int64_t epoch,
                         int64_t generation) {
  const int64_t T = source_.sample_shape()[0];
  int64_t* x = slot.inputs.data_ptr<int64_t>();
  int64_t* y = slot.targets.data_ptr<int64_t>();
  for (int64_t j = 0; j < size; ++j) {
    if (j % 16 == 0) check_current(generation);
    const int64_t index = order_[static_cast<size_t>(begin + j)];
    source_.read_tokens(index, sample_draw(epoch, index), x + j * T, y + j * T);
  }
}

void Loader::fill_images(Slot& slot, int64_t begin, int64_t size, int64_t epoch,
                         int64_t generation) {
  const std::vector<int64_t> in = source_.sample_shape();
  const std::vector<int64_t> out = output_shape();
  const int64_t C = in[0], H = in[1], W = in[2], OH = out[1], OW = out[2];
  const int64_t sample_bytes = C * H * W;
  const TransformOptions& t = o_.transform;
  const SampleShape shape{C, H, W, OH, OW, static_cast<float>(1.0 / (255.0 * t.std)),
                          static_cast<float>(-t.mean / t.std)};
  thread_local std::vector<uint8_t> pixels;
  pixels.resize(static_cast<size_t>(sample_bytes));
  float* dst = slot.inputs.data_ptr<float>();
  int64_t* labels = slot.targets.data_ptr<int64_t>();
  int64_t hits = 0;  // counted once the batch is whole: abandoned work is not in the stats
  for (int64_t j = 0; j < size; ++j) {
    if (j % 16 == 0) check_current(generation);
    const int64_t index = order_[static_cast<size_t>(begin + j)];
    int64_t label = 0;
    try {
      const uint8_t* src = nullptr;
      if (cache_ && index < cache_->capacity) {
        auto& state = cache_->state[static_cast<size_t>(index)];
        uint8_t* cached = cache_->pixels.data() + index * sample_bytes;
        if (state.load(std::memory_order_acquire) == 2) {
          src = cached;
          label = cache_->labels[static_cast<size_t>(index)];
          ++hits;
        } else {
          label = source_.read(index, pixels.data());
          src = pixels.data();
          uint8_t empty = 0;
          if (state.compare_exchange_strong(empty, 1)) {
            std::memcpy(cached, pixels.data(), static_cast<size_t>(sample_bytes));
            cache_->labels[static_cast<size_t>(index)] = label;
            state.store(2, std::memory_order_release);
          }
        }
      } else {
        label = source_.read(index, pixels.data());
        src = pixels.data();
      }
      transform_sample(src, dst + j * C * OH * OW, shape, t, sample_draw(epoch, index));
    } catch (const Abandoned&) {
      throw;
    } catch (const std::exception& e) {
      SATURATE_CHECK(false, "data: ", source_.describe(), ": sample ", index, ": ", e.what());
    }
    labels[j] = label;
  }
  cache_hits_.fetch_add(hits, std::memory_order_relaxed);
}

std::optional<Batch> Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (handed_out_ >= batches_) return std::nullopt;
  const int64_t k = handed_out_;
  Slot& slot = *slots_[static_cast<size_t>(k % static_cast<int64_t>(slots_.size()))];
  const auto t0 = Clock::now();
  if (o_.workers == 0) {
    const int64_t epoch = epoch_;
    lock.unlock();
    fill(slot, k, epoch);  // errors propagate as they are
    lock.lock();
    slot.state = Slot::State::kReady;
    slot.batch = k;
    slot.generation = generation_;
  } else {
    ready_cv_.wait(lock, [&] {
      return stop_ || (slot.batch == k && slot.generation == generation_ &&
                       (slot.state == Slot::State::kReady || slot.state == Slot::State::kFailed));
    });
    SATURATE_CHECK(!stop_, "loader: stopped");
    wait_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  ++handed_out_;
  const bool failed = slot.state == Slot::State::kFailed;
  const std::string error = slot.error;
  lock.unlock();
  work_cv_.notify_all();  // the slot before this one is free now
  SATURATE_CHECK(!failed, error);
  Batch b;
  b.size = slot.size;
  b.inputs = slot.inputs.narrow(0, 0, slot.size);
  b.targets = slot.targets.narrow(0, 0, slot.size);
  if (copier_) return copier_->copy(b, static_cast<int>(k % static_cast<int64_t>(slots_.size())));
  return b;
}

}  // namespace saturate
