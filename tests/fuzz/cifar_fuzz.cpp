// SPDX-License-Identifier: Apache-2.0
// parse_cifar_records on arbitrary bytes, read as CIFAR-10 and as CIFAR-100: every record it
// returns has a whole image and a label in range, or it throws saturate::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "saturate/core/error.h"
#include "saturate/data/cifar_reader.h"

namespace {

void check(const uint8_t* data, size_t size, saturate::CifarKind kind) {
  try {
    const saturate::CifarRecords r = saturate::parse_cifar_records(data, size, kind, "fuzz");
    if (r.pixels.size() != r.labels.size() * saturate::kCifarImageBytes ||
        r.labels.size() * saturate::cifar_record_bytes(kind) != size) {
      std::abort();
    }
    for (int64_t label : r.labels) {
      if (label < 0 || label >= saturate::cifar_num_classes(kind)) std::abort();
    }
  } catch (const saturate::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check(data, size, saturate::CifarKind::kCifar10);
  check(data, size, saturate::CifarKind::kCifar100);
  return 0;
}
