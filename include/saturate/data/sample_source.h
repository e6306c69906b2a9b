// SPDX-License-Identifier: Apache-2.0
#pragma once
// SampleSource: random access to the samples of one split, for the parallel Loader. Readers of
// every format (in-memory tensors, CIFAR binary, .npy, image folders, packed records, synthetic)
// implement it; read() is called from several worker threads at once.
//
//   auto src = make_sample_source(splits.train);          // in-memory split
//   std::vector<uint8_t> px(src->sample_bytes());
//   int64_t label = src->read(17, px.data());

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace saturate {

struct TensorDataset;

/// Samples are uint8 images of one fixed shape {C, H, W} (channel-major) and an int64 label.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  /// {C, H, W} of every sample read() writes.
  virtual std::vector<int64_t> sample_shape() const = 0;
  virtual int64_t num_classes() const = 0;
  /// C × H × W.
  int64_t sample_bytes() const;
  /// Writes sample `index` (0 <= index < size()) into `pixels` (sample_bytes() bytes, C-major)
  /// and returns its label. Thread-safe. Throws saturate::Error naming the file and the sample
  /// for data it cannot decode.
  virtual int64_t read(int64_t index, uint8_t* pixels) const = 0;
  /// One line for logs: "fashion-mnist/train (60000 in memory)".
  virtual std::string describe() const = 0;
  /// Text instead of images: each sample is a window of tokens, sample_shape() is {seq_len},
  /// num_classes() the vocabulary, and the Loader calls read_tokens(), never read().
  virtual bool is_token_source() const { return false; }
  /// Writes sample `index`'s seq_len input tokens and their next-token targets. `draw` is the
  /// Loader's per-sample random number (from its seed, the epoch and the index), so a window
  /// does not depend on which worker reads it. Thread-safe.
  virtual void read_tokens(int64_t index, uint64_t draw, int64_t* inputs, int64_t* targets) const;
};

/// A view of an in-memory split. It shares the split's tensors (no pixels are copied) and keeps
/// them alive, so the TensorDataset object itself may be moved or destroyed.
std::unique_ptr<SampleSource> make_sample_source(const TensorDataset& data);

/// "synthetic:C,H,W,CLASSES,COUNT[,DECODE_US]": deterministic pseudo-random images whose pixels
/// depend on the index and whose label is index % CLASSES; each read spends DECODE_US
/// microseconds of CPU (a stand-in for JPEG decoding) — for loader benchmarks and tests.
/// Throws saturate::Error naming the field for a malformed spec.
std::unique_ptr<SampleSource> make_synthetic_source(const std::string& spec);

}  // namespace saturate
