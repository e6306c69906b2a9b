// SPDX-License-Identifier: Apache-2.0
#pragma once
// Saturate record files (.rec): one split of fixed-shape uint8 images and int64 labels, laid out
// so a memory-mapped file serves any sample with one bounds check and one memcpy. Convert once
// from any SampleSource, then read at page-cache speed from many loader threads.
//
//   saturate::write_record_file("train.rec", *saturate::make_sample_source(splits.train));
//   saturate::RecordFileSource train("train.rec");
//   std::vector<uint8_t> px(train.sample_bytes());
//   int64_t label = train.read(17, px.data());
//
// Layout, all integers little-endian. Page 0 holds the header, pages 1..P the samples, and the
// label index follows the last page:
//
//   offset  bytes  header field
//        0      8  magic "SATREC01"
//        8      4  version, 1
//       12      4  page_bytes: a positive multiple of 4096 that holds at least one slot
//       16      8  sample_count
//       24     12  channels, height, width (C, H, W), each >= 1
//       36      4  num_classes, >= 1
//       40      8  index_offset = page_bytes * (1 + P), P = ceil(sample_count / per_page)
//       48     16  reserved, zero; then zero padding to page_bytes
//
//   slot_bytes = round_up(8 + C*H*W, 8); per_page = page_bytes / slot_bytes
//   sample i lives at page 1 + i / per_page, slot i % per_page: an int64 label, then C*H*W
//   pixel bytes (channel-major), then zero padding. Samples never straddle a page.
//   index: sample_count int64 labels, the same as in the slots, so label-only passes (class
//   counts, balanced sampling) need not touch the pixel pages. File size = index_offset +
//   8 * sample_count exactly.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "saturate/data/sample_source.h"

namespace saturate {

constexpr char kRecordFileMagic[] = "SATREC01";
constexpr uint32_t kRecordFileVersion = 1;
constexpr int64_t kRecordFileHeaderBytes = 64;
constexpr int64_t kRecordFilePageAlignment = 4096;
constexpr int64_t kDefaultRecordPageBytes = 64 * 1024;

/// The decoded header fields, plus the layout they imply.
struct RecordFileHeader {
  int64_t page_bytes = 0;
  int64_t sample_count = 0;
  int64_t channels = 0, height = 0, width = 0;
  int64_t num_classes = 0;
  int64_t index_offset = 0;
  /// C * H * W.
  int64_t pixel_bytes() const { return channels * height * width; }
  /// 8 label bytes + pixel_bytes(), rounded up to a multiple of 8.
  int64_t slot_bytes() const { return (8 + pixel_bytes() + 7) / 8 * 8; }
  int64_t samples_per_page() const { return page_bytes / slot_bytes(); }
  /// Byte offset of sample `index`'s slot from the start of the file.
  int64_t slot_offset(int64_t index) const;
  /// index_offset + 8 * sample_count.
  int64_t file_bytes() const { return index_offset + 8 * sample_count; }
};

/// A validated, read-only view of a record file held in memory (a mapping or a buffer) that
/// must outlive it. Immutable, so read() is safe from any number of threads.
class RecordFileView {
 public:
  /// Validates the header fields, that `size` is exactly the size they describe and that every
  /// label in the index is in [0, num_classes); reads no pixel page. `name` (usually the path)
  /// appears in every error. Throws saturate::Error "records: <name>: ..." naming the field
  /// that is wrong; a short buffer names the first incomplete sample (or the label index).
  RecordFileView(const uint8_t* bytes, size_t size, std::string name);

  const RecordFileHeader& header() const { return header_; }
  const std::string& name() const { return name_; }
  /// Copies sample `index`'s pixels (header().pixel_bytes() bytes) to `pixels` and returns its
  /// label. Throws saturate::Error naming the file and the sample when the slot's label is
  /// outside [0, num_classes) (a slot damaged after the index was validated).
  int64_t read(int64_t index, uint8_t* pixels) const;
  /// Label of sample `index` from the index (no pixel page is touched).
  int64_t label(int64_t index) const;

 private:
  const uint8_t* bytes_;
  std::string name_;
  RecordFileHeader header_;
};

/// A SampleSource over a memory-mapped record file (POSIX mmap, read-only, shared). Replacing
/// the file with write_record_file is safe while it is mapped (the rename leaves this mapping on
/// the old file); truncating it in place is not: reads past the new end raise SIGBUS.
class RecordFileSource final : public SampleSource {
 public:
  /// Maps and validates `path` (see RecordFileView). Throws saturate::Error "records: <path>:
  /// ..." when the file cannot be opened or mapped or is not a valid record file.
  explicit RecordFileSource(const std::string& path);
  ~RecordFileSource() override;
  RecordFileSource(const RecordFileSource&) = delete;
  RecordFileSource& operator=(const RecordFileSource&) = delete;

  int64_t size() const override;
  std::vector<int64_t> sample_shape() const override;
  int64_t num_classes() const override;
  int64_t read(int64_t index, uint8_t* pixels) const override;
  /// "PATH (60000 samples, memory-mapped)".
  std::string describe() const override;
  const RecordFileView& view() const { return *view_; }

 private:
  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  std::unique_ptr<RecordFileView> view_;
};

struct RecordFileOptions {
  /// Bytes per page: a positive multiple of 4096. Grown to the next multiple of 4096 that
  /// holds one slot when a sample is larger.
  int64_t page_bytes = kDefaultRecordPageBytes;
};

/// Writes every sample of `source`, in order, as a record file at `path`. Atomic: the data go to
/// a temporary file beside `path` that is synced and then renamed over it, so readers see the
/// old file or the whole new one, never a partial one. Returns the header written. Throws
/// saturate::Error "records: <path>: ..." for a source whose shape is not {C, H, W} with each
/// >= 1, whose num_classes is below 1, or whose read() returns a label outside
/// [0, num_classes) (naming the sample), for invalid options, or when writing fails; the
/// temporary file is removed and `path` is left as it was. Errors from source.read() propagate.
RecordFileHeader write_record_file(const std::string& path, const SampleSource& source,
                                   const RecordFileOptions& options = {});

}  // namespace saturate
