// SPDX-License-Identifier: Apache-2.0
// parse_idx on arbitrary bytes: it returns a consistent array or throws saturate::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "saturate/core/error.h"
#include "saturate/data/idx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const saturate::IdxArray a = saturate::parse_idx(data, size, "fuzz");
    if (a.dims.empty() || a.data.size() != static_cast<size_t>(a.numel()) *
                                               saturate::idx_element_size(a.type)) {
      std::abort();
    }
  } catch (const saturate::Error&) {
  }
  return 0;
}
