// SPDX-License-Identifier: Apache-2.0
// decode_image on arbitrary bytes (JPEG through libjpeg-turbo, PNG through libpng), to gray and
// to RGB, then the bilinear resize to a few sizes: a decoded image has the pixels its header
// promises in the channels asked for, or decoding throws saturate::Error; nothing else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "data/image_decode.h"
#include "saturate/core/error.h"

namespace {

void check(const uint8_t* data, size_t size, int channels) {
  saturate::detail::DecodedImage image;
  try {
    image = saturate::detail::decode_image(data, size, channels, "jpeg");
  } catch (const saturate::Error&) {
    return;
  }
  if (image.channels != channels || image.height <= 0 || image.width <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.height * image.width * channels)) {
    std::abort();
  }
  // Down, up and to the same size (the copy path).
  const int64_t sizes[3][2] = {{1, 1}, {image.height + 3, 2 * image.width}, {image.height, image.width}};
  for (const auto& s : sizes) {
    if (s[0] * s[1] > (int64_t{1} << 22)) continue;
    std::vector<uint8_t> out(static_cast<size_t>(channels * s[0] * s[1]) + 1, 0xA5);
    saturate::detail::resize_to_chw(image, s[0], s[1], out.data());
    if (out.back() != 0xA5) std::abort();  // wrote past C × H × W
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check(data, size, 1);
  check(data, size, 3);
  return 0;
}
