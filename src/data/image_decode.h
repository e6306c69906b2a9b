// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private: JPEG (libjpeg-turbo) and PNG (libpng) decoding from memory, and the bilinear resize
// ImageFolderSource applies. No shared state, so every function is safe from any thread.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace saturate::detail {

/// Interleaved 8-bit pixels, row-major: height × width × channels.
struct DecodedImage {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

/// Decodes a JPEG or PNG (told apart by their signatures; `ext_hint` — "jpeg" or "png", from
/// the file name — only words the error for data that is neither) to `channels` (1: gray,
/// 3: RGB) 8-bit channels. Throws saturate::Error with the reason alone ("not a JPEG: ...",
/// "corrupt JPEG: ...", "corrupt PNG: ..."); the caller adds the file and sample.
DecodedImage decode_image(const uint8_t* data, size_t size, int channels, const char* ext_hint);

/// Resizes `image` to out_height × out_width with bilinear interpolation (pixel centres aligned,
/// as torch's interpolate(align_corners=false) without antialiasing; a plain copy when the size
/// already matches) and writes it channel-major (C × H × W) to `out`.
void resize_to_chw(const DecodedImage& image, int64_t out_height, int64_t out_width, uint8_t* out);

}  // namespace saturate::detail
