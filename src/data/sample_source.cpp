// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/sample_source.h"

#include <chrono>
#include <cstring>
#include <sstream>

#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/data/dataset.h"

namespace saturate {

int64_t SampleSource::sample_bytes() const {
  int64_t n = 1;
  for (int64_t d : sample_shape()) n *= d;
  return n;
}

void SampleSource::read_tokens(int64_t, uint64_t, int64_t*, int64_t*) const {
  SATURATE_ASSERT(false, describe(), " holds images, not tokens");
}

namespace {

class TensorSource final : public SampleSource {
 public:
  explicit TensorSource(const TensorDataset& d) : d_(d) {
    SATURATE_CHECK(d.inputs.defined() && d.inputs.scalar_type() == at::kByte &&
                       d.inputs.dim() == 4 && d.inputs.is_contiguous(),
                   "data: ", d.name, " is not a contiguous uint8 [N, C, H, W] tensor");
    bytes_ = d.inputs.numel() / std::max<int64_t>(1, d.inputs.size(0));
    pixels_ = d.inputs.data_ptr<uint8_t>();
    labels_ = d.targets.contiguous();
  }
  int64_t size() const override { return d_.size(); }
  std::vector<int64_t> sample_shape() const override { return d_.sample_shape(); }
  int64_t num_classes() const override { return d_.num_classes; }
  int64_t read(int64_t index, uint8_t* out) const override {
    SATURATE_ASSERT(index >= 0 && index < size(), "sample ", index, " out of range");
    std::memcpy(out, pixels_ + index * bytes_, static_cast<size_t>(bytes_));
    return labels_.data_ptr<int64_t>()[index];
  }
  std::string describe() const override {
    return d_.name + " (" + std::to_string(size()) + " in memory)";
  }

 private:
  const TensorDataset d_;  // shares the tensors: no pixels copied, and none left dangling
  int64_t bytes_ = 0;
  const uint8_t* pixels_ = nullptr;
  at::Tensor labels_;
};

class SyntheticSource final : public SampleSource {
 public:
  SyntheticSource(std::vector<int64_t> shape, int64_t classes, int64_t count, int64_t decode_us)
      : shape_(std::move(shape)), classes_(classes), count_(count), decode_us_(decode_us) {}
  int64_t size() const override { return count_; }
  std::vector<int64_t> sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return classes_; }
  int64_t read(int64_t index, uint8_t* out) const override {
    SATURATE_ASSERT(index >= 0 && index < count_, "sample ", index, " out of range");
    // A cheap hash of (index, position): deterministic, different per sample.
    uint64_t x = static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ULL + 1;
    const int64_t n = sample_bytes();
    for (int64_t i = 0; i < n; ++i) {
      x ^= x >> 33;
      x *= 0xFF51AFD7ED558CCDULL;
      out[i] = static_cast<uint8_t>(x >> 56);
    }
    if (decode_us_ > 0) {
      // Busy work standing in for a decoder: it occupies a core, as decoding does.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(decode_us_);
      volatile uint64_t sink = x;
      while (std::chrono::steady_clock::now() < until) sink = sink * 6364136223846793005ULL + 1;
    }
    return index % classes_;
  }
  std::string describe() const override {
    std::ostringstream s;
    s << "synthetic " << shape_[0] << "x" << shape_[1] << "x" << shape_[2] << ", " << classes_
      << " classes, " << count_ << " samples, " << decode_us_ << " us decode";
    return s.str();
  }

 private:
  std::vector<int64_t> shape_;
  int64_t classes_, count_, decode_us_;
};

int64_t parse_field(const std::string& text, const char* field, const std::string& spec,
                    int64_t min) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SATURATE_CHECK(used == text.size() && !text.empty() && v >= min, "data: '", spec, "': ", field,
                 " must be an integer >= ", min, ", got '", text, "'");
  return v;
}

}  // namespace

std::unique_ptr<SampleSource> make_sample_source(const TensorDataset& data) {
  return std::make_unique<TensorSource>(data);
}

std::unique_ptr<SampleSource> make_synthetic_source(const std::string& spec) {
  const std::string prefix = "synthetic:";
  SATURATE_CHECK(spec.rfind(prefix, 0) == 0, "data: '", spec, "' is not a synthetic: spec");
  std::vector<std::string> parts;
  std::stringstream in(spec.substr(prefix.size()));
  for (std::string p; std::getline(in, p, ',');) parts.push_back(p);
  SATURATE_CHECK(parts.size() == 5 || parts.size() == 6, "data: '", spec,
                 "': expected synthetic:C,H,W,CLASSES,COUNT[,DECODE_US]");
  const int64_t c = parse_field(parts[0], "C", spec, 1);
  const int64_t h = parse_field(parts[1], "H", spec, 1);
  const int64_t w = parse_field(parts[2], "W", spec, 1);
  const int64_t classes = parse_field(parts[3], "CLASSES", spec, 2);
  const int64_t count = parse_field(parts[4], "COUNT", spec, 1);
  const int64_t decode = parts.size() == 6 ? parse_field(parts[5], "DECODE_US", spec, 0) : 0;
  SATURATE_CHECK(c * h * w <= (64LL << 20), "data: '", spec, "': samples above 64 MiB");
  return std::make_unique<SyntheticSource>(std::vector<int64_t>{c, h, w}, classes, count, decode);
}

}  // namespace saturate
