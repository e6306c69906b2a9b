// SPDX-License-Identifier: Apache-2.0
#pragma once
// TrainingInput: the one input pipeline that `train`, `profile` and every `tune` trial build
// for a data spec and its input flags. It opens the data (streaming folder:/records: training
// splits), carves a seeded validation split out of the training samples when asked, and holds
// the Loader settings (transforms, normalisation, cache, pinning) that each run completes with
// its batch size, seed, workers and prefetch depth.
//
//   InputOptions in;  in.data_spec = "folder:imgs";  in.crop = 28;  in.val_fraction = 0.05;
//   TrainingInput input = open_training_input(in, /*cuda_device=*/-1);
//   Loader loader(*input.source, input.loader_options(batch, seed, workers, prefetch));

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "saturate/data/dataset.h"
#include "saturate/data/loader.h"
#include "saturate/data/sample_source.h"
#include "saturate/data/text_corpus.h"

namespace saturate {

/// What a run reads and how: the recipe's data flags.
struct InputOptions {
  std::string data_spec = "fashion-mnist";  ///< any load_dataset() spec, or synthetic:...
  int64_t cache_bytes = 0;  ///< decoded-sample cache of each Loader (0: none)
  int64_t crop = 0;         ///< random crop SIZE (0: none); evaluation splits get the centre
  int64_t pad = 0;          ///< zero pixels a side before cropping (needs crop)
  bool flip = false;        ///< random horizontal flips of training samples
  /// Share of the training samples held out as the validation split, in [0, 0.5); 0: none.
  double val_fraction = 0;
  uint64_t val_seed = 0;    ///< which samples are held out
  /// Text data: tokens per training window (0: 128). Images take none.
  int64_t seq_len = 0;
};

struct TrainingInput {
  /// test (and validation, when carved) in memory, centre-cropped to the training crop;
  /// normalisation statistics of the training split. `splits.train` is empty for a streamed
  /// or synthetic source.
  DatasetSplits splits;
  std::unique_ptr<SampleSource> all;     ///< every training sample
  std::unique_ptr<SampleSource> source;  ///< the training samples less the validation split
  LoaderOptions loader;                  ///< transforms, cache, pinning; batch etc. per run
  std::vector<int64_t> sample_shape;     ///< {C, H, W} the model sees (after cropping)
  int64_t num_classes = 0;
  bool streamed = false;                 ///< training samples are read from files per batch
  InputOptions options;
  /// Text data ("text:PATH"): the token stream. The training windows start anywhere in its
  /// first 1 − val_fraction (0.1 when --val-fraction is 0); the validation split tiles the rest.
  std::shared_ptr<const TokenCorpus> corpus;
  /// Tokens per sample: the window length for text, 0 for images.
  int64_t tokens_per_sample() const { return corpus ? sample_shape.at(0) : 0; }

  /// `loader` with one run's batch size, shuffle seed, workers and prefetch depth.
  LoaderOptions loader_options(int64_t batch_size, uint64_t seed, int workers,
                               int prefetch) const;
};

/// Opens `options.data_spec` for training on a device: `cuda_device` >= 0 pins the Loader's
/// buffers and copies batches to that GPU on a side stream. Throws saturate::Error naming the
/// flag for impossible options (--pad without --crop, a crop larger than the images,
/// --val-fraction outside [0, 0.5) or leaving no training sample, --seq-len with images, a text
/// corpus whose training part or held-out tail holds no window) and what load_dataset() or
/// open_token_corpus() throws for the spec.
TrainingInput open_training_input(const InputOptions& options, int cuda_device);

/// A view of `indices` of `inner` (which must outlive it), renumbered 0..indices.size()-1.
std::unique_ptr<SampleSource> make_subset_source(const SampleSource& inner,
                                                 std::vector<int64_t> indices,
                                                 std::string name);

/// Reads every sample of `source` into memory (uint8 [N, C, H, W]) — a small split, such as a
/// held-out validation split of a streamed folder.
TensorDataset read_into_memory(const SampleSource& source, const std::string& name);

}  // namespace saturate
