// SPDX-License-Identifier: Apache-2.0
#include "data/image_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

// jpeglib.h needs FILE and size_t declared first (cstdio above).
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "saturate/core/error.h"

namespace saturate::detail {
namespace {

// Larger images are refused rather than allocated: a corrupt header can claim 65500 x 65500.
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

// Everything the setjmp frame touches lives here, in the caller's frame, so no local of
// decode_jpeg_raw changes between setjmp and longjmp (their values would be indeterminate).
struct JpegContext {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr error_manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  unsigned char* pixels;  // malloc'd: nothing with a destructor may sit between the longjmp ends
  int64_t width, height, channels;
};

// libjpeg's default error_exit calls exit(); this one returns to decode_jpeg_raw's setjmp.
void jpeg_error_exit(j_common_ptr cinfo) {
  JpegContext* ctx = reinterpret_cast<JpegContext*>(cinfo->client_data);
  (*cinfo->err->format_message)(cinfo, ctx->message);
  std::longjmp(ctx->jump, 1);
}

// Warnings go nowhere (the library never prints), except missing image data: a truncated file
// (JWRN_JPEG_EOF) or entropy-coded data that stops at a marker (JWRN_HIT_MARKER, "premature end
// of data segment"). libjpeg pads both with grey and carries on, which would hand training a
// silently damaged image, and lets a 100-byte file claim a 16000-pixel-wide one (the image fuzz
// target found that). Other warnings ("extraneous bytes before marker") are tolerated, as other
// decoders tolerate them.
void jpeg_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) {
    const int code = cinfo->err->msg_code;
    if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER) jpeg_error_exit(cinfo);
    ++cinfo->err->num_warnings;
  }
}

void jpeg_output_message(j_common_ptr /*cinfo*/) {}

// C-style on purpose: longjmp skips this frame's destructors, so it holds no C++ objects.
// Returns false with ctx->message set on any libjpeg error.
bool decode_jpeg_raw(const uint8_t* data, size_t size, int channels, JpegContext* ctx) {
  ctx->cinfo.err = jpeg_std_error(&ctx->error_manager);
  ctx->error_manager.error_exit = jpeg_error_exit;
  ctx->error_manager.emit_message = jpeg_emit_message;
  ctx->error_manager.output_message = jpeg_output_message;
  if (setjmp(ctx->jump) != 0) {
    jpeg_destroy_decompress(&ctx->cinfo);
    std::free(ctx->pixels);
    ctx->pixels = nullptr;
    return false;
  }
  ctx->cinfo.client_data = ctx;  // jpeg_create_decompress keeps it (and may already fail)
  jpeg_create_decompress(&ctx->cinfo);
  jpeg_mem_src(&ctx->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&ctx->cinfo, TRUE);
  if (static_cast<int64_t>(ctx->cinfo.image_width) * ctx->cinfo.image_height > kMaxImagePixels) {
    std::snprintf(ctx->message, sizeof(ctx->message), "image too large: %ux%u pixels",
                  ctx->cinfo.image_width, ctx->cinfo.image_height);
    jpeg_destroy_decompress(&ctx->cinfo);
    return false;
  }
  ctx->cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&ctx->cinfo);
  const size_t row_bytes = static_cast<size_t>(ctx->cinfo.output_width) *
                           static_cast<size_t>(ctx->cinfo.output_components);
  ctx->pixels = static_cast<unsigned char*>(std::malloc(row_bytes * ctx->cinfo.output_height));
  if (ctx->pixels == nullptr) {
    std::snprintf(ctx->message, sizeof(ctx->message), "out of memory");
    jpeg_destroy_decompress(&ctx->cinfo);
    return false;
  }
  while (ctx->cinfo.output_scanline < ctx->cinfo.output_height) {
    JSAMPROW row = ctx->pixels + row_bytes * ctx->cinfo.output_scanline;
    jpeg_read_scanlines(&ctx->cinfo, &row, 1);
  }
  ctx->width = ctx->cinfo.output_width;
  ctx->height = ctx->cinfo.output_height;
  ctx->channels = ctx->cinfo.output_components;
  jpeg_finish_decompress(&ctx->cinfo);
  jpeg_destroy_decompress(&ctx->cinfo);
  return true;
}

DecodedImage decode_jpeg(const uint8_t* data, size_t size, int channels) {
  JpegContext ctx;
  std::memset(&ctx, 0, sizeof(ctx));  // a zeroed cinfo makes jpeg_destroy_decompress a no-op
  if (!decode_jpeg_raw(data, size, channels, &ctx)) {
    throw Error(concat("corrupt JPEG: ", ctx.message));
  }
  const std::unique_ptr<unsigned char, void (*)(void*)> owned(ctx.pixels, std::free);
  DecodedImage image;
  image.height = ctx.height;
  image.width = ctx.width;
  image.channels = ctx.channels;
  image.pixels.assign(ctx.pixels, ctx.pixels + ctx.width * ctx.height * ctx.channels);
  return image;
}

// libpng's simplified API catches its own errors (setjmp inside libpng) and reports them in
// image.message; it never prints.
DecodedImage decode_png(const uint8_t* data, size_t size, int channels) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, data, size)) {
    const std::string message = png.message;
    png_image_free(&png);
    throw Error(concat("corrupt PNG: ", message));
  }
  if (static_cast<int64_t>(png.width) * png.height > kMaxImagePixels) {
    png_image_free(&png);
    throw Error(concat("image too large: ", png.width, "x", png.height, " pixels"));
  }
  png.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  DecodedImage image;
  image.height = png.height;
  image.width = png.width;
  image.channels = channels;
  // Zeroed: an alpha channel is composited onto the buffer, so transparent pixels come out black.
  image.pixels.assign(PNG_IMAGE_SIZE(png), 0);
  if (!png_image_finish_read(&png, /*background=*/nullptr, image.pixels.data(),
                             /*row_stride=*/0, /*colormap=*/nullptr)) {
    const std::string message = png.message;
    png_image_free(&png);
    throw Error(concat("corrupt PNG: ", message));
  }
  return image;
}

std::string first_bytes(const uint8_t* data, size_t size) {
  if (size == 0) return "the file is empty";
  char text[64];
  std::snprintf(text, sizeof(text), "starts with 0x%02x", data[0]);
  std::string out = text;
  if (size > 1) {
    std::snprintf(text, sizeof(text), " 0x%02x", data[1]);
    out += text;
  }
  return out;
}

}  // namespace

DecodedImage decode_image(const uint8_t* data, size_t size, int channels, const char* ext_hint) {
  SATURATE_ASSERT(channels == 1 || channels == 3, "channels ", channels);
  static const uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
    return decode_jpeg(data, size, channels);
  }
  if (size >= 8 && std::memcmp(data, kPngSignature, 8) == 0)
    return decode_png(data, size, channels);
  const bool is_png_name = std::strcmp(ext_hint, "png") == 0;
  throw Error(concat(is_png_name ? "not a PNG: " : "not a JPEG: ", first_bytes(data, size)));
}

void resize_to_chw(const DecodedImage& image, int64_t out_height, int64_t out_width, uint8_t* out) {
  const int64_t c_count = image.channels, in_h = image.height, in_w = image.width;
  const uint8_t* in = image.pixels.data();
  const int64_t plane = out_height * out_width;
  if (in_h == out_height && in_w == out_width) {
    for (int64_t y = 0; y < in_h; ++y)
      for (int64_t x = 0; x < in_w; ++x)
        for (int64_t c = 0; c < c_count; ++c)
          out[c * plane + y * out_width + x] = in[(y * in_w + x) * c_count + c];
    return;
  }
  // Fixed-point weights (11 bits each way) keep the result identical on every machine.
  constexpr int64_t kOne = 1 << 11;
  struct Tap {
    int64_t lo, hi, weight;  // weight of `hi`, in 1/kOne
  };
  auto taps = [](int64_t in_size, int64_t out_size) {
    std::vector<Tap> t(static_cast<size_t>(out_size));
    const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
    for (int64_t i = 0; i < out_size; ++i) {
      double src = (static_cast<double>(i) + 0.5) * scale - 0.5;
      if (src < 0) src = 0;
      int64_t lo = static_cast<int64_t>(src);
      if (lo > in_size - 1) lo = in_size - 1;
      const int64_t hi = lo + 1 < in_size ? lo + 1 : lo;
      int64_t w = static_cast<int64_t>((src - static_cast<double>(lo)) * kOne + 0.5);
      if (w > kOne) w = kOne;
      t[static_cast<size_t>(i)] = {lo, hi, w};
    }
    return t;
  };
  const std::vector<Tap> ys = taps(in_h, out_height), xs = taps(in_w, out_width);
  for (int64_t y = 0; y < out_height; ++y) {
    const Tap& ty = ys[static_cast<size_t>(y)];
    const uint8_t* row0 = in + ty.lo * in_w * c_count;
    const uint8_t* row1 = in + ty.hi * in_w * c_count;
    for (int64_t x = 0; x < out_width; ++x) {
      const Tap& tx = xs[static_cast<size_t>(x)];
      for (int64_t c = 0; c < c_count; ++c) {
        const int64_t a = row0[tx.lo * c_count + c], b = row0[tx.hi * c_count + c];
        const int64_t d = row1[tx.lo * c_count + c], e = row1[tx.hi * c_count + c];
        const int64_t top = a * (kOne - tx.weight) + b * tx.weight;
        const int64_t bottom = d * (kOne - tx.weight) + e * tx.weight;
        const int64_t v = top * (kOne - ty.weight) + bottom * ty.weight;
        out[c * plane + y * out_width + x] =
            static_cast<uint8_t>((v + kOne * kOne / 2) / (kOne * kOne));
      }
    }
  }
}

}  // namespace saturate::detail
