// SPDX-License-Identifier: Apache-2.0
// parse_npy on arbitrary bytes, then the image and label views the data layer takes of it:
// each returns consistent values or throws saturate::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "saturate/core/error.h"
#include "saturate/data/npy_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  saturate::NpyArray array;
  try {
    array = saturate::parse_npy(data, size, "fuzz");
  } catch (const saturate::Error&) {
    return 0;
  }
  if (array.data.size() !=
      static_cast<size_t>(array.numel()) * saturate::npy_element_size(array.type)) {
    std::abort();
  }
  try {
    const auto nchw = saturate::npy_image_shape(array, "fuzz");
    if (nchw[0] * nchw[1] * nchw[2] * nchw[3] != array.numel()) std::abort();
  } catch (const saturate::Error&) {
  }
  try {
    for (int64_t label : saturate::npy_labels(array, "fuzz")) {
      if (label < 0) std::abort();
    }
  } catch (const saturate::Error&) {
  }
  return 0;
}
