// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/record_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>

#include "saturate/core/error.h"

namespace saturate {
namespace {

constexpr size_t kMagicBytes = 8;
constexpr int64_t kLabelBytes = 8;
constexpr int64_t kReservedOffset = 48;
// Keeps every size computation far from int64 overflow; no real split comes near it.
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 60;

uint64_t get_le(const uint8_t* p, int num_bytes) {
  uint64_t v = 0;
  for (int i = num_bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void put_le(uint8_t* p, uint64_t v, int num_bytes) {
  for (int i = 0; i < num_bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

int64_t get_label(const uint8_t* p) {
  return static_cast<int64_t>(get_le(p, static_cast<int>(kLabelBytes)));
}

// Whether a label and C*H*W pixels fit in `page_bytes`. C, H and W are below 2^32, so C*H
// cannot overflow 64 bits, and once C*H is at most page_bytes (< 2^32) neither can C*H*W.
bool sample_fits_page(int64_t channels, int64_t height, int64_t width, int64_t page_bytes) {
  const uint64_t plane_bytes = static_cast<uint64_t>(channels) * static_cast<uint64_t>(height);
  return plane_bytes <= static_cast<uint64_t>(page_bytes) &&
         plane_bytes * static_cast<uint64_t>(width) + kLabelBytes <=
             static_cast<uint64_t>(page_bytes);
}

std::string printable(const uint8_t* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i)
    out += (p[i] >= 0x20 && p[i] < 0x7F) ? static_cast<char>(p[i]) : '?';
  return out;
}

// The header's fields, each checked on its own before any is combined, so no product below
// can overflow: C, H, W < 2^32 and page_bytes < 2^32 bound slot_bytes, and sample_count is
// bounded before it is multiplied.
RecordFileHeader parse_header(const uint8_t* bytes, size_t size, const std::string& name) {
  SATURATE_CHECK(size >= static_cast<size_t>(kRecordFileHeaderBytes), "records: ", name,
                 ": too short for a record file header (", size, " bytes, need ",
                 kRecordFileHeaderBytes, ")");
  SATURATE_CHECK(std::memcmp(bytes, kRecordFileMagic, kMagicBytes) == 0, "records: ", name,
                 ": not a saturate record file: magic is '", printable(bytes, kMagicBytes),
                 "', expected '", kRecordFileMagic, "'");
  const uint64_t version = get_le(bytes + 8, 4);
  SATURATE_CHECK(version == kRecordFileVersion, "records: ", name, ": unsupported version ",
                 version, ", expected ", kRecordFileVersion);
  RecordFileHeader h;
  h.page_bytes = static_cast<int64_t>(get_le(bytes + 12, 4));
  SATURATE_CHECK(h.page_bytes > 0 && h.page_bytes % kRecordFilePageAlignment == 0,
                 "records: ", name, ": page size ", h.page_bytes, " is not a positive multiple of ",
                 kRecordFilePageAlignment);
  const uint64_t sample_count = get_le(bytes + 16, 8);
  h.channels = static_cast<int64_t>(get_le(bytes + 24, 4));
  h.height = static_cast<int64_t>(get_le(bytes + 28, 4));
  h.width = static_cast<int64_t>(get_le(bytes + 32, 4));
  SATURATE_CHECK(h.channels >= 1 && h.height >= 1 && h.width >= 1, "records: ", name,
                 ": sample shape ", h.channels, "x", h.height, "x", h.width,
                 " has a zero dimension");
  SATURATE_CHECK(sample_fits_page(h.channels, h.height, h.width, h.page_bytes), "records: ", name,
                 ": a ", h.channels, "x", h.height, "x", h.width,
                 " sample does not fit in a page of ", h.page_bytes, " bytes");
  SATURATE_CHECK(h.slot_bytes() <= h.page_bytes, "records: ", name, ": a ", h.slot_bytes(),
                 "-byte slot does not fit in a page of ", h.page_bytes, " bytes");
  h.num_classes = static_cast<int64_t>(get_le(bytes + 36, 4));
  SATURATE_CHECK(h.num_classes >= 1, "records: ", name, ": num_classes is 0, expected >= 1");
  const uint64_t max_samples = kMaxFileBytes / static_cast<uint64_t>(h.page_bytes);
  SATURATE_CHECK(sample_count <= max_samples, "records: ", name, ": sample count ", sample_count,
                 " is implausibly large; the header is corrupt");
  h.sample_count = static_cast<int64_t>(sample_count);
  const int64_t pages = (h.sample_count + h.samples_per_page() - 1) / h.samples_per_page();
  const int64_t expected_index_offset = h.page_bytes * (1 + pages);
  const uint64_t index_offset = get_le(bytes + 40, 8);
  SATURATE_CHECK(index_offset == static_cast<uint64_t>(expected_index_offset), "records: ", name,
                 ": index offset ", index_offset, " does not match the layout of ", h.sample_count,
                 " samples in ", h.page_bytes, "-byte pages (expected ", expected_index_offset,
                 ")");
  h.index_offset = expected_index_offset;
  for (int64_t i = kReservedOffset; i < kRecordFileHeaderBytes; ++i) {
    SATURATE_CHECK(bytes[i] == 0, "records: ", name, ": reserved header byte ", i, " is ",
                   int{bytes[i]}, ", expected 0");
  }
  return h;
}

// Index of the first sample whose label and pixels do not all lie within `size` bytes;
// sample_count when every sample is whole. End offsets grow with the index: binary search.
int64_t first_incomplete_sample(const RecordFileHeader& h, size_t size) {
  int64_t lo = 0, hi = h.sample_count;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const auto end = static_cast<uint64_t>(h.slot_offset(mid) + kLabelBytes + h.pixel_bytes());
    if (end > size) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Removes a temporary file unless the write it belongs to completed.
class TempFile {
 public:
  explicit TempFile(const std::string& target) {
    static std::atomic<uint64_t> counter{0};
    path_ = detail::concat(target, ".tmp-", ::getpid(), "-", counter++);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    SATURATE_CHECK(fd_ >= 0, "records: ", target, ": cannot create ", path_, ": ",
                   std::strerror(errno));
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!is_committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write_all(const uint8_t* data, size_t n, const std::string& target) {
    while (n > 0) {
      const ssize_t done = ::write(fd_, data, n);
      if (done < 0 && errno == EINTR) continue;
      SATURATE_CHECK(done > 0, "records: ", target, ": write failed: ", std::strerror(errno));
      data += done;
      n -= static_cast<size_t>(done);
    }
  }

  // fsync before rename: otherwise a crash can leave `target` naming a file whose data never
  // reached the disk.
  void commit(const std::string& target) {
    SATURATE_CHECK(::fsync(fd_) == 0, "records: ", target, ": sync failed: ", std::strerror(errno));
    const int rc = ::close(fd_);
    fd_ = -1;
    SATURATE_CHECK(rc == 0, "records: ", target, ": write failed: ", std::strerror(errno));
    SATURATE_CHECK(::rename(path_.c_str(), target.c_str()) == 0, "records: ", target,
                   ": cannot rename ", path_, " to it: ", std::strerror(errno));
    is_committed_ = true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool is_committed_ = false;
};

}  // namespace

int64_t RecordFileHeader::slot_offset(int64_t index) const {
  const int64_t per_page = samples_per_page();
  return page_bytes * (1 + index / per_page) + slot_bytes() * (index % per_page);
}

RecordFileView::RecordFileView(const uint8_t* bytes, size_t size, std::string name)
    : bytes_(bytes), name_(std::move(name)), header_(parse_header(bytes, size, name_)) {
  const auto expected = static_cast<uint64_t>(header_.file_bytes());
  if (size < expected) {
    const int64_t sample = first_incomplete_sample(header_, size);
    const std::string sizes =
        detail::concat(" (", size, " bytes, the header describes ", expected, ")");
    SATURATE_CHECK(sample >= header_.sample_count, "records: ", name_, ": truncated at sample ",
                   sample, " of ", header_.sample_count, sizes);
    SATURATE_CHECK(size >= static_cast<uint64_t>(header_.index_offset), "records: ", name_,
                   ": truncated before the label index", sizes);
    SATURATE_CHECK(false, "records: ", name_, ": truncated in the label index", sizes);
  }
  SATURATE_CHECK(size == expected, "records: ", name_, ": ", size - expected,
                 " trailing bytes after the label index (the header describes ", expected,
                 " bytes)");
  for (int64_t i = 0; i < header_.sample_count; ++i) {
    const int64_t l = label(i);
    SATURATE_CHECK(l >= 0 && l < header_.num_classes, "records: ", name_, ": label index says ",
                   "sample ", i, " has label ", l, ", expected 0..", header_.num_classes - 1);
  }
}

int64_t RecordFileView::label(int64_t index) const {
  SATURATE_ASSERT(index >= 0 && index < header_.sample_count, "sample ", index, " out of range");
  return get_label(bytes_ + header_.index_offset + kLabelBytes * index);
}

int64_t RecordFileView::read(int64_t index, uint8_t* pixels) const {
  SATURATE_ASSERT(index >= 0 && index < header_.sample_count, "sample ", index, " out of range");
  const uint8_t* slot = bytes_ + header_.slot_offset(index);
  const int64_t l = get_label(slot);
  SATURATE_CHECK(l >= 0 && l < header_.num_classes, "records: ", name_, ": sample ", index,
                 " has label ", l, ", expected 0..", header_.num_classes - 1);
  std::memcpy(pixels, slot + kLabelBytes, static_cast<size_t>(header_.pixel_bytes()));
  return l;
}

RecordFileSource::RecordFileSource(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SATURATE_CHECK(fd >= 0, "records: ", path, ": cannot open: ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    const int err = errno;
    ::close(fd);
    SATURATE_CHECK(false, "records: ", path, ": ",
                   err != 0 ? std::strerror(err) : "not a regular file");
  }
  mapping_bytes_ = static_cast<size_t>(info.st_size);
  // mmap rejects a zero length; an empty file gets the view's "too short" error instead.
  if (mapping_bytes_ > 0) {
    mapping_ = ::mmap(nullptr, mapping_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  }
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file open
  if (mapping_ == MAP_FAILED) mapping_ = nullptr;
  SATURATE_CHECK(mapping_bytes_ == 0 || mapping_ != nullptr, "records: ", path,
                 ": cannot map: ", std::strerror(map_errno));
  try {
    view_ = std::make_unique<RecordFileView>(static_cast<const uint8_t*>(mapping_), mapping_bytes_,
                                             path);
  } catch (...) {
    if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
    throw;
  }
}

RecordFileSource::~RecordFileSource() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
}

int64_t RecordFileSource::size() const { return view_->header().sample_count; }

std::vector<int64_t> RecordFileSource::sample_shape() const {
  const RecordFileHeader& h = view_->header();
  return {h.channels, h.height, h.width};
}

int64_t RecordFileSource::num_classes() const { return view_->header().num_classes; }

int64_t RecordFileSource::read(int64_t index, uint8_t* pixels) const {
  return view_->read(index, pixels);
}

std::string RecordFileSource::describe() const {
  return detail::concat(path_, " (", size(), " samples, memory-mapped)");
}

RecordFileHeader write_record_file(const std::string& path, const SampleSource& source,
                                   const RecordFileOptions& options) {
  const std::vector<int64_t> shape = source.sample_shape();
  const auto fits_u32 = [](int64_t v) {
    return v >= 1 && v <= int64_t{std::numeric_limits<uint32_t>::max()};
  };
  SATURATE_CHECK(
      shape.size() == 3 && fits_u32(shape[0]) && fits_u32(shape[1]) && fits_u32(shape[2]),
      "records: ", path, ": ", source.describe(),
      " has a sample shape that is not {C, H, W} with each in 1..2^32-1");
  SATURATE_CHECK(fits_u32(source.num_classes()), "records: ", path, ": ", source.describe(),
                 " has ", source.num_classes(), " classes, expected 1..2^32-1");
  SATURATE_CHECK(options.page_bytes > 0 && options.page_bytes % kRecordFilePageAlignment == 0,
                 "records: ", path, ": page size ", options.page_bytes,
                 " is not a positive multiple of ", kRecordFilePageAlignment);

  RecordFileHeader h;
  h.channels = shape[0];
  h.height = shape[1];
  h.width = shape[2];
  h.num_classes = source.num_classes();
  h.sample_count = source.size();
  SATURATE_CHECK(h.sample_count >= 0, "records: ", path, ": ", source.describe(), " has ",
                 h.sample_count, " samples");
  const int64_t max_page_bytes = int64_t{std::numeric_limits<uint32_t>::max()} /
                                 kRecordFilePageAlignment * kRecordFilePageAlignment;
  SATURATE_CHECK(sample_fits_page(h.channels, h.height, h.width, max_page_bytes), "records: ", path,
                 ": ", h.channels, "x", h.height, "x", h.width,
                 " samples are too large for a record file (pages are at most ", max_page_bytes,
                 " bytes)");
  const int64_t slot_bytes = h.slot_bytes();
  h.page_bytes =
      std::max(options.page_bytes, (slot_bytes + kRecordFilePageAlignment - 1) /
                                       kRecordFilePageAlignment * kRecordFilePageAlignment);
  SATURATE_CHECK(h.page_bytes <= max_page_bytes, "records: ", path, ": page size ", h.page_bytes,
                 " exceeds ", max_page_bytes);
  const int64_t per_page = h.samples_per_page();
  const int64_t pages = (h.sample_count + per_page - 1) / per_page;
  h.index_offset = h.page_bytes * (1 + pages);

  std::vector<uint8_t> page(static_cast<size_t>(h.page_bytes), 0);
  std::memcpy(page.data(), kRecordFileMagic, kMagicBytes);
  put_le(page.data() + 8, kRecordFileVersion, 4);
  put_le(page.data() + 12, static_cast<uint64_t>(h.page_bytes), 4);
  put_le(page.data() + 16, static_cast<uint64_t>(h.sample_count), 8);
  put_le(page.data() + 24, static_cast<uint64_t>(h.channels), 4);
  put_le(page.data() + 28, static_cast<uint64_t>(h.height), 4);
  put_le(page.data() + 32, static_cast<uint64_t>(h.width), 4);
  put_le(page.data() + 36, static_cast<uint64_t>(h.num_classes), 4);
  put_le(page.data() + 40, static_cast<uint64_t>(h.index_offset), 8);

  TempFile file(path);
  file.write_all(page.data(), page.size(), path);
  std::vector<uint8_t> index(static_cast<size_t>(kLabelBytes * h.sample_count));
  for (int64_t first = 0; first < h.sample_count; first += per_page) {
    std::fill(page.begin(), page.end(), 0);
    const int64_t last = std::min(first + per_page, h.sample_count);
    for (int64_t i = first; i < last; ++i) {
      uint8_t* slot = page.data() + slot_bytes * (i - first);
      const int64_t label = source.read(i, slot + kLabelBytes);
      SATURATE_CHECK(label >= 0 && label < h.num_classes, "records: ", path, ": sample ", i, " of ",
                     source.describe(), " has label ", label, ", expected 0..", h.num_classes - 1);
      put_le(slot, static_cast<uint64_t>(label), static_cast<int>(kLabelBytes));
      put_le(index.data() + kLabelBytes * i, static_cast<uint64_t>(label),
             static_cast<int>(kLabelBytes));
    }
    file.write_all(page.data(), page.size(), path);
  }
  file.write_all(index.data(), index.size(), path);
  file.commit(path);
  return h;
}

}  // namespace saturate
