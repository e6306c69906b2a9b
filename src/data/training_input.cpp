// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/training_input.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "saturate/core/error.h"

namespace saturate {
namespace {

class SubsetSource final : public SampleSource {
 public:
  SubsetSource(const SampleSource& inner, std::vector<int64_t> indices, std::string name)
      : inner_(inner), indices_(std::move(indices)), name_(std::move(name)) {}
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  std::vector<int64_t> sample_shape() const override { return inner_.sample_shape(); }
  int64_t num_classes() const override { return inner_.num_classes(); }
  int64_t read(int64_t index, uint8_t* pixels) const override {
    SATURATE_ASSERT(index >= 0 && index < size(), "sample ", index, " out of range");
    return inner_.read(indices_[static_cast<size_t>(index)], pixels);
  }
  std::string describe() const override {
    return name_ + " (" + std::to_string(size()) + " of " + inner_.describe() + ")";
  }

 private:
  const SampleSource& inner_;
  std::vector<int64_t> indices_;
  std::string name_;
};

// The centre h x w of each image of `d` (evaluation sees what the random crop sees on average).
void centre_crop(TensorDataset& d, int64_t h, int64_t w, int64_t crop) {
  at::Tensor& x = d.inputs;
  if (!x.defined() || x.dim() != 4 || (x.size(2) == h && x.size(3) == w)) return;
  SATURATE_CHECK(h <= x.size(2) && w <= x.size(3), "--crop ", crop, " is larger than the ",
                 d.name, " images (", x.size(2), "x", x.size(3), ")");
  x = x.narrow(2, (x.size(2) - h) / 2, h).narrow(3, (x.size(3) - w) / 2, w).contiguous();
}

// "text:PATH": random training windows from the head of the token stream, the validation
// split tiling its tail.
TrainingInput open_text_input(const InputOptions& options, int cuda_device) {
  SATURATE_CHECK(options.crop == 0 && options.pad == 0 && !options.flip,
                 "--crop, --pad and --flip are for images, not ", options.data_spec);
  SATURATE_CHECK(options.seq_len >= 0, "--seq-len must be positive, got ", options.seq_len);
  TrainingInput in;
  in.options = options;
  in.corpus = open_token_corpus(parse_text_spec(options.data_spec), token_cache_dir());
  const TokenCorpus& c = *in.corpus;
  const int64_t t = options.seq_len > 0 ? options.seq_len : 128;
  const double val = options.val_fraction > 0 ? options.val_fraction : 0.1;
  const int64_t end = c.train_end(val);
  SATURATE_CHECK(end >= t + 1, "data: ", c.describe(), ": its training part (", end,
                 " tokens) is shorter than one window of --seq-len ", t, " plus its target");
  SATURATE_CHECK(c.size() - end >= t + 1, "data: ", c.describe(), ": the held-out tail (",
                 c.size() - end, " tokens, --val-fraction ", val,
                 ") is shorter than one validation window of --seq-len ", t, " plus its target");
  in.all = make_token_window_source(in.corpus, 0, c.size(), t);
  in.source = make_token_window_source(in.corpus, 0, end, t);
  in.splits.validation = token_windows_in_memory(c, end, c.size(), t, "validation");
  in.splits.description = c.describe();
  in.num_classes = c.vocab_size();
  in.streamed = true;
  in.sample_shape = {t};
  in.loader.pin_memory = cuda_device >= 0;
  in.loader.cuda_device = cuda_device;
  return in;
}

}  // namespace

std::unique_ptr<SampleSource> make_subset_source(const SampleSource& inner,
                                                 std::vector<int64_t> indices, std::string name) {
  for (int64_t i : indices)
    SATURATE_CHECK(i >= 0 && i < inner.size(), "data: subset index ", i, " outside [0, ",
                   inner.size(), ")");
  return std::make_unique<SubsetSource>(inner, std::move(indices), std::move(name));
}

TensorDataset read_into_memory(const SampleSource& source, const std::string& name) {
  const std::vector<int64_t> shape = source.sample_shape();
  const int64_t n = source.size();
  TensorDataset d;
  d.name = name;
  d.num_classes = source.num_classes();
  d.inputs = torch::empty({n, shape[0], shape[1], shape[2]}, torch::kUInt8);
  d.targets = torch::empty({n}, torch::kLong);
  uint8_t* px = d.inputs.data_ptr<uint8_t>();
  int64_t* labels = d.targets.data_ptr<int64_t>();
  const int64_t bytes = source.sample_bytes();
  // Decoding (a folder of JPEGs) is the cost; read() is thread-safe.
  at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) labels[i] = source.read(i, px + i * bytes);
  });
  return d;
}

LoaderOptions TrainingInput::loader_options(int64_t batch_size, uint64_t seed, int workers,
                                            int prefetch) const {
  LoaderOptions o = loader;
  o.batch_size = batch_size;
  o.seed = seed;
  o.workers = workers;
  o.prefetch = prefetch;
  return o;
}

TrainingInput open_training_input(const InputOptions& options, int cuda_device) {
  SATURATE_CHECK(options.pad == 0 || options.crop > 0, "--pad needs --crop");
  SATURATE_CHECK(options.val_fraction >= 0 && options.val_fraction < 0.5,
                 "--val-fraction must be in [0, 0.5), got ", options.val_fraction);
  if (is_text_spec(options.data_spec)) return open_text_input(options, cuda_device);
  SATURATE_CHECK(options.seq_len == 0, "--seq-len is for text data (text:PATH), not ",
                 options.data_spec);
  TrainingInput in;
  in.options = options;
  const std::string& spec = options.data_spec;
  if (spec.rfind("synthetic:", 0) == 0) {
    in.all = make_synthetic_source(spec);
    in.splits.description = in.all->describe();
    in.streamed = true;
  } else {
    OpenedDataset opened = open_dataset(spec);
    in.splits = std::move(opened.splits);
    in.all = std::move(opened.train);
    in.streamed = opened.streamed;
  }
  in.num_classes = in.all->num_classes();
  LoaderOptions& o = in.loader;
  o.pin_memory = cuda_device >= 0;
  o.cuda_device = cuda_device;
  o.cache_bytes = options.cache_bytes;
  o.transform.mean = in.splits.normalize_mean;
  o.transform.std = in.splits.normalize_std;
  o.transform.crop = options.crop;
  o.transform.pad = options.pad;
  o.transform.flip = options.flip;

  // The validation split: a seeded choice of training samples, held out of every epoch.
  const int64_t n = in.all->size();
  const auto held = static_cast<int64_t>(std::llround(options.val_fraction * static_cast<double>(n)));
  if (options.val_fraction > 0) {
    SATURATE_CHECK(held >= 1 && held < n, "--val-fraction ", options.val_fraction, " of ", n,
                   " training samples holds out ", held, "; it needs at least 1 and must leave ",
                   "training samples");
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(options.val_seed ^ 0x5A7E11DA7AULL);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> val(order.begin(), order.begin() + held);
    std::vector<int64_t> train(order.begin() + held, order.end());
    std::sort(val.begin(), val.end());
    std::sort(train.begin(), train.end());  // the Loader shuffles; sorted keeps files in order
    const std::unique_ptr<SampleSource> val_source =
        make_subset_source(*in.all, std::move(val), "validation");
    in.splits.validation = read_into_memory(*val_source, "validation");
    in.source = make_subset_source(*in.all, std::move(train), "train");
  } else {
    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    in.source = make_subset_source(*in.all, std::move(all), "train");
  }
  // The Loader checks the crop against the images; the evaluation splits get their centre.
  in.sample_shape = Loader(*in.source, in.loader_options(1, 0, 0, 1)).output_shape();
  const int64_t h = in.sample_shape[1], w = in.sample_shape[2];
  centre_crop(in.splits.test, h, w, options.crop);
  centre_crop(in.splits.validation, h, w, options.crop);
  return in;
}

}  // namespace saturate
