// SPDX-License-Identifier: Apache-2.0
// RecordFileView on arbitrary bytes: it validates the header and size or throws
// saturate::Error; a view that validates must then read any sample within the buffer.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/data/record_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const saturate::RecordFileView view(data, size, "fuzz");
    const saturate::RecordFileHeader& h = view.header();
    if (h.file_bytes() != static_cast<int64_t>(size)) std::abort();
    std::vector<uint8_t> pixels(static_cast<size_t>(h.pixel_bytes()));
    // The first samples, and the last, which ends nearest the index.
    const int64_t count = h.sample_count;
    for (int64_t i = 0; i < count; i = i < 16 ? i + 1 : std::max(i + 1, count - 1)) {
      const int64_t label = view.read(i, pixels.data());
      if (label < 0 || label >= h.num_classes || view.label(i) < 0) std::abort();
    }
  } catch (const saturate::Error&) {
  }
  return 0;
}
