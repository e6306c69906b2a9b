// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/image_folder.h"

#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/data/dataset.h"
#include "saturate/data/record_file.h"
#include "saturate/data/sample_source.h"
#include "testing/error_of.h"
#include "testing/temp_dir.h"

namespace saturate {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;

// Interleaved (H × W × C) pixels of a smooth gradient, distinct per `seed` and channel.
std::vector<uint8_t> gradient(int width, int height, int channels, int seed) {
  std::vector<uint8_t> px(static_cast<size_t>(width * height * channels));
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c)
        px[static_cast<size_t>((y * width + x) * channels + c)] =
            static_cast<uint8_t>((x * 9 + y * 5 + c * 60 + seed * 17) % 256);
  return px;
}

// The same pixels channel-major (C × H × W), as read() writes them.
std::vector<uint8_t> to_chw(const std::vector<uint8_t>& hwc, int width, int height, int channels) {
  std::vector<uint8_t> out(hwc.size());
  for (int c = 0; c < channels; ++c)
    for (int i = 0; i < width * height; ++i)
      out[static_cast<size_t>(c * width * height + i)] = hwc[static_cast<size_t>(i * channels + c)];
  return out;
}

ImageFolderOptions options_of(int64_t height, int64_t width, int64_t channels) {
  ImageFolderOptions o;
  o.height = height;
  o.width = width;
  o.channels = channels;
  return o;
}

void make_dir(const std::string& path) { ::mkdir(path.c_str(), 0755); }

void write_png(const std::string& path, int width, int height, int channels,
               const std::vector<uint8_t>& hwc) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  ASSERT_TRUE(png_image_write_to_file(&image, path.c_str(), /*convert_to_8bit=*/0, hwc.data(),
                                      /*row_stride=*/0, /*colormap=*/nullptr))
      << image.message;
}

void write_jpeg(const std::string& path, int width, int height, int channels,
                const std::vector<uint8_t>& hwc, int quality = 95) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(hwc.data()) +
                   static_cast<size_t>(cinfo.next_scanline) * static_cast<size_t>(width * channels);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(buffer), static_cast<std::streamsize>(size));
  std::free(buffer);
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// ROOT/<class>/<i>.png for each class, `per_class` 8x6 RGB gradients each.
void make_png_folder(const std::string& root, const std::vector<std::string>& classes,
                     int per_class) {
  make_dir(root);
  for (size_t k = 0; k < classes.size(); ++k) {
    make_dir(root + "/" + classes[k]);
    for (int i = 0; i < per_class; ++i) {
      write_png(root + "/" + classes[k] + "/" + std::to_string(i) + ".png", 8, 6, 3,
                gradient(8, 6, 3, static_cast<int>(k) * 10 + i));
    }
  }
}

TEST(ImageFolderSource, DecodesPngExactly) {
  TempDir tmp;
  make_png_folder(tmp.file("set"), {"cat", "dog"}, 2);
  const ImageFolderSource source(tmp.file("set"),
                                 options_of(/*height=*/6, /*width=*/8, /*channels=*/3));
  ASSERT_EQ(source.size(), 4);
  EXPECT_EQ(source.sample_shape(), (std::vector<int64_t>{3, 6, 8}));
  std::vector<uint8_t> px(static_cast<size_t>(source.sample_bytes()));
  EXPECT_EQ(source.read(3, px.data()), 1);
  EXPECT_EQ(px, to_chw(gradient(8, 6, 3, 11), 8, 6, 3));
}

TEST(ImageFolderSource, DecodesJpegWithinTolerance) {
  TempDir tmp;
  make_dir(tmp.file("set"));
  make_dir(tmp.file("set/a"));
  // No wrap-around edges: JPEG blurs sharp ones far beyond any sensible tolerance.
  std::vector<uint8_t> original(16 * 16 * 3);
  for (size_t i = 0; i < original.size(); ++i) {
    const size_t pixel = i / 3, x = pixel % 16, y = pixel / 16;
    original[i] = static_cast<uint8_t>(x * 6 + y * 4 + (i % 3) * 20);
  }
  write_jpeg(tmp.file("set/a/0.jpg"), 16, 16, 3, original);
  write_jpeg(tmp.file("set/a/1.JPEG"), 16, 16, 1, gradient(16, 16, 1, 0));
  const ImageFolderSource source(tmp.file("set"), options_of(16, 16, 3));
  ASSERT_EQ(source.size(), 2);
  std::vector<uint8_t> px(static_cast<size_t>(source.sample_bytes()));
  EXPECT_EQ(source.read(0, px.data()), 0);
  const std::vector<uint8_t> want = to_chw(original, 16, 16, 3);
  int max_diff = 0;
  double sum_diff = 0;
  for (size_t i = 0; i < px.size(); ++i) {
    const int d = std::abs(int{px[i]} - int{want[i]});
    max_diff = std::max(max_diff, d);
    sum_diff += d;
  }
  EXPECT_LE(max_diff, 24) << "mean " << sum_diff / static_cast<double>(px.size());
  EXPECT_LE(sum_diff / static_cast<double>(px.size()), 4.0);
  source.read(1, px.data());  // a grey JPEG decodes to RGB with three equal planes
  EXPECT_TRUE(std::equal(px.begin(), px.begin() + 256, px.begin() + 256));
}

TEST(ImageFolderSource, ResizesToTargetSizeAndChannels) {
  TempDir tmp;
  make_dir(tmp.file("set"));
  make_dir(tmp.file("set/a"));
  std::vector<uint8_t> flat(20 * 10 * 3);
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = i % 3 == 0 ? 200 : (i % 3 == 1 ? 40 : 90);
  write_png(tmp.file("set/a/flat.png"), 20, 10, 3, flat);
  const ImageFolderSource rgb(tmp.file("set"), options_of(4, 5, 3));
  std::vector<uint8_t> px(static_cast<size_t>(rgb.sample_bytes()));
  ASSERT_EQ(px.size(), 3u * 4 * 5);
  rgb.read(0, px.data());
  for (size_t i = 0; i < px.size(); ++i) ASSERT_EQ(px[i], i < 20 ? 200 : (i < 40 ? 40 : 90)) << i;

  // Upscaling a 2x1 image interpolates between its two pixels, deterministically.
  make_dir(tmp.file("two"));
  make_dir(tmp.file("two/a"));
  write_png(tmp.file("two/a/x.png"), 2, 1, 1, {0, 200});
  const ImageFolderSource grey(tmp.file("two"), options_of(1, 4, 1));
  std::vector<uint8_t> row(4);
  grey.read(0, row.data());
  EXPECT_EQ(row, (std::vector<uint8_t>{0, 50, 150, 200}));

  const ImageFolderSource to_grey(tmp.file("set"), options_of(2, 2, 1));
  std::vector<uint8_t> g(4);
  to_grey.read(0, g.data());
  EXPECT_EQ(g[0], g[3]);
  EXPECT_GT(g[0], 40);
  EXPECT_LT(g[0], 200);
}

TEST(ImageFolderSource, LabelsFollowSortedClassFoldersAndFiles) {
  TempDir tmp;
  make_dir(tmp.file("set"));
  for (const char* cls : {"zebra", "ant"}) {
    make_dir(tmp.file(std::string("set/") + cls));
    for (const char* name : {"2.png", "10.png", "1.png"}) {
      write_png(tmp.file(std::string("set/") + cls + "/" + name), 2, 2, 1, {1, 2, 3, 4});
    }
  }
  write_bytes(tmp.file("set/ant/notes.txt"), {'h', 'i'});
  write_bytes(tmp.file("set/README"), {'h', 'i'});
  const ImageFolderSource source(tmp.file("set"), options_of(2, 2, 1));
  EXPECT_EQ(source.classes(), (std::vector<std::string>{"ant", "zebra"}));
  EXPECT_EQ(source.num_classes(), 2);
  ASSERT_EQ(source.size(), 6);
  EXPECT_EQ(source.path(0), tmp.file("set/ant/1.png"));
  EXPECT_EQ(source.path(1), tmp.file("set/ant/10.png"));
  EXPECT_EQ(source.path(5), tmp.file("set/zebra/2.png"));
  std::vector<uint8_t> px(4);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(source.read(i, px.data()), i / 3);
  EXPECT_TRUE(contains(source.describe(), "6 images, 2 classes, decoded to 1x2x2"));
}

TEST(ImageFolderSource, CorruptJpegNamesFileAndSample) {
  TempDir tmp;
  make_dir(tmp.file("set"));
  make_dir(tmp.file("set/cat"));
  for (int i = 0; i < 4; ++i) {
    write_jpeg(tmp.file("set/cat/00" + std::to_string(i) + ".jpg"), 16, 16, 3,
               gradient(16, 16, 3, i));
  }
  write_bytes(tmp.file("set/cat/001.jpg"), {'h', 'e', 'l', 'l', 'o'});
  std::vector<uint8_t> truncated = file_bytes(tmp.file("set/cat/003.jpg"));
  truncated.resize(truncated.size() / 2);
  write_bytes(tmp.file("set/cat/003.jpg"), truncated);
  std::vector<uint8_t> garbled = file_bytes(tmp.file("set/cat/002.jpg"));
  for (size_t i = 4; i < 40 && i < garbled.size(); ++i) garbled[i] = 0x00;  // bogus APP0 length
  write_bytes(tmp.file("set/cat/002.jpg"), garbled);

  const ImageFolderSource source(tmp.file("set"), options_of(16, 16, 3));
  std::vector<uint8_t> px(static_cast<size_t>(source.sample_bytes()));
  EXPECT_EQ(source.read(0, px.data()), 0);
  std::string e = error_of([&] { source.read(1, px.data()); });
  EXPECT_TRUE(contains(e, "image: " + tmp.file("set/cat/001.jpg") + " (sample 1): not a JPEG"));
  e = error_of([&] { source.read(2, px.data()); });
  EXPECT_TRUE(contains(e, "image: " + tmp.file("set/cat/002.jpg") + " (sample 2): corrupt JPEG"));
  e = error_of([&] { source.read(3, px.data()); });
  EXPECT_TRUE(contains(e, "image: " + tmp.file("set/cat/003.jpg") + " (sample 3): corrupt JPEG"));
  EXPECT_TRUE(contains(e, "Premature end"));

  // Image data cut short but closed with an end-of-image marker: libjpeg would pad it with grey.
  std::vector<uint8_t> cut = file_bytes(tmp.file("set/cat/000.jpg"));
  cut.resize(cut.size() / 2);
  cut.push_back(0xFF);
  cut.push_back(0xD9);
  write_bytes(tmp.file("set/cat/000.jpg"), cut);
  e = error_of([&] { source.read(0, px.data()); });
  EXPECT_TRUE(contains(e, "image: " + tmp.file("set/cat/000.jpg") + " (sample 0): corrupt JPEG"));
}

TEST(ImageFolderSource, TruncatedPngNamesFileAndSample) {
  TempDir tmp;
  make_png_folder(tmp.file("set"), {"a", "b"}, 2);
  std::vector<uint8_t> bytes = file_bytes(tmp.file("set/b/0.png"));
  bytes.resize(bytes.size() - 20);
  write_bytes(tmp.file("set/b/0.png"), bytes);
  write_bytes(tmp.file("set/b/1.png"), {'G', 'I', 'F', '8'});
  const ImageFolderSource source(tmp.file("set"), options_of(6, 8, 3));
  std::vector<uint8_t> px(static_cast<size_t>(source.sample_bytes()));
  std::string e = error_of([&] { source.read(2, px.data()); });
  EXPECT_TRUE(contains(e, "image: " + tmp.file("set/b/0.png") + " (sample 2): corrupt PNG: "));
  e = error_of([&] { source.read(3, px.data()); });
  EXPECT_TRUE(contains(e, "image: " + tmp.file("set/b/1.png") + " (sample 3): not a PNG"));
  // A file that vanished after listing is named the same way.
  std::remove(tmp.file("set/a/1.png").c_str());
  e = error_of([&] { source.read(1, px.data()); });
  EXPECT_TRUE(contains(e, "image: " + tmp.file("set/a/1.png") + " (sample 1): cannot open"));
}

TEST(ImageFolderSource, RejectsFoldersWithoutClassesOrImages) {
  TempDir tmp;
  EXPECT_TRUE(contains(error_of([&] { ImageFolderSource s(tmp.file("none")); }),
                       tmp.file("none") + " not found"));
  make_dir(tmp.file("empty"));
  EXPECT_TRUE(contains(error_of([&] { ImageFolderSource s(tmp.file("empty")); }),
                       tmp.file("empty") + " has no class sub-folders"));
  make_dir(tmp.file("empty/cat"));
  EXPECT_TRUE(contains(error_of([&] { ImageFolderSource s(tmp.file("empty")); }),
                       tmp.file("empty/cat") + " holds no .jpg, .jpeg or .png files"));
  make_png_folder(tmp.file("set"), {"a"}, 1);
  EXPECT_TRUE(
      contains(error_of([&] { ImageFolderSource s(tmp.file("set"), options_of(32, 32, 2)); }),
               "channels must be 1 or 3, got 2"));
  ImageFolderOptions only_b;
  only_b.classes = {"b"};
  EXPECT_TRUE(contains(error_of([&] { ImageFolderSource s(tmp.file("set"), only_b); }),
                       "class 'a' is not one of the 1 training classes (b)"));
}

TEST(ImageFolderSource, ConcurrentReadsEqualSerialReads) {
  TempDir tmp;
  make_png_folder(tmp.file("set"), {"a", "b", "c"}, 6);
  const ImageFolderSource source(tmp.file("set"), options_of(5, 7, 3));
  const auto n = static_cast<size_t>(source.size());
  const auto bytes = static_cast<size_t>(source.sample_bytes());
  std::vector<uint8_t> serial(n * bytes), parallel(n * bytes);
  std::vector<int64_t> serial_labels(n), parallel_labels(n);
  for (size_t i = 0; i < n; ++i) {
    serial_labels[i] = source.read(static_cast<int64_t>(i), serial.data() + i * bytes);
  }
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = t; i < n; i += 4) {
          parallel_labels[i] = source.read(static_cast<int64_t>(i), parallel.data() + i * bytes);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(parallel, serial);
  EXPECT_EQ(parallel_labels, serial_labels);
}

TEST(ImageFolderSource, ParsesImageSize) {
  ImageFolderOptions o;
  parse_image_size("28x30x1", "test", o);
  EXPECT_EQ(o.height, 28);
  EXPECT_EQ(o.width, 30);
  EXPECT_EQ(o.channels, 1);
  for (const char* bad : {"28x28", "28x28x2", "axbx3", "28x28x3x", "0x4x3", ""}) {
    EXPECT_TRUE(contains(error_of([&] { parse_image_size(bad, "test", o); }), "test: image size"))
        << bad;
  }
}

TEST(LoadDataset, FolderSpecDecodesBothSplits) {
  TempDir tmp;
  make_dir(tmp.file("pets"));
  make_png_folder(tmp.file("pets/train"), {"cat", "dog"}, 3);
  make_png_folder(tmp.file("pets/test"), {"dog"}, 2);  // a test split may lack a class
  const DatasetSplits d = load_dataset("folder:" + tmp.file("pets") + "@5x7x1");
  EXPECT_EQ(d.train.inputs.sizes(), (std::vector<int64_t>{6, 1, 5, 7}));
  EXPECT_EQ(d.test.inputs.sizes(), (std::vector<int64_t>{2, 1, 5, 7}));
  EXPECT_EQ(d.train.num_classes, 2);
  EXPECT_EQ(d.test.targets[0].item<int64_t>(), 1);  // "dog" is train class 1
  EXPECT_EQ(d.train.targets[5].item<int64_t>(), 1);
  EXPECT_EQ(d.train.name, "pets/train");
  EXPECT_TRUE(contains(d.description, "6 train, 2 test, 1x5x7, 2 classes"));

  // Decoding in parallel gives what a single reader gives.
  const ImageFolderSource train(tmp.file("pets/train"), options_of(5, 7, 1));
  std::vector<uint8_t> px(35);
  train.read(4, px.data());
  EXPECT_TRUE(std::equal(px.begin(), px.end(), d.train.inputs[4].data_ptr<uint8_t>()));

  const DatasetSplits rgb = load_dataset("folder:" + tmp.file("pets"));
  EXPECT_EQ(rgb.train.inputs.sizes(), (std::vector<int64_t>{6, 3, 32, 32}));

  EXPECT_TRUE(contains(error_of([&] { load_dataset("folder:" + tmp.file("pets") + "@5x7"); }),
                       "image size '5x7' is not HxWxC"));
  make_dir(tmp.file("pets/test/bird"));
  write_png(tmp.file("pets/test/bird/0.png"), 2, 2, 1, {1, 2, 3, 4});
  EXPECT_TRUE(contains(error_of([&] { load_dataset("folder:" + tmp.file("pets")); }),
                       "class 'bird' is not one of the 2 training classes"));
  EXPECT_TRUE(contains(error_of([&] { load_dataset(tmp.file("pets")); }),
                       "use folder:" + tmp.file("pets")));
}

TEST(LoadDataset, FolderSpecReportsCorruptImage) {
  TempDir tmp;
  make_dir(tmp.file("pets"));
  make_png_folder(tmp.file("pets/train"), {"cat", "dog"}, 3);
  make_png_folder(tmp.file("pets/test"), {"cat", "dog"}, 1);
  write_bytes(tmp.file("pets/train/dog/1.png"), {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'});
  EXPECT_TRUE(contains(error_of([&] { load_dataset("folder:" + tmp.file("pets")); }),
                       "image: " + tmp.file("pets/train/dog/1.png") + " (sample 4): corrupt PNG"));
}

TEST(OpenDataset, FolderAndRecordSpecsStreamTheTrainingSplit) {
  TempDir tmp;
  make_dir(tmp.file("pets"));
  make_png_folder(tmp.file("pets/train"), {"cat", "dog"}, 3);
  make_png_folder(tmp.file("pets/test"), {"cat", "dog"}, 1);
  const std::string spec = "folder:" + tmp.file("pets") + "@6x8x3";
  const DatasetSplits full = load_dataset(spec);
  const OpenedDataset opened = open_dataset(spec);
  ASSERT_TRUE(opened.streamed);
  EXPECT_EQ(opened.splits.train.size(), 0);  // nothing decoded ahead
  EXPECT_EQ(opened.train->size(), 6);
  EXPECT_EQ(opened.train->sample_shape(), (std::vector<int64_t>{3, 6, 8}));
  EXPECT_TRUE(opened.splits.test.inputs.equal(full.test.inputs));
  EXPECT_EQ(opened.splits.train.num_classes, 2);
  // Fewer samples than the statistics' sample size: the very same numbers as the full split's.
  EXPECT_DOUBLE_EQ(opened.splits.normalize_mean, full.normalize_mean);
  EXPECT_DOUBLE_EQ(opened.splits.normalize_std, full.normalize_std);
  EXPECT_TRUE(contains(opened.splits.description, "6 train (read as trained), 2 test, 3x6x8"));
  std::vector<uint8_t> px(static_cast<size_t>(opened.train->sample_bytes()));
  EXPECT_EQ(opened.train->read(4, px.data()), 1);
  EXPECT_TRUE(std::equal(px.begin(), px.end(), full.train.inputs[4].data_ptr<uint8_t>()));

  // The same data packed into record files streams from the mapping.
  make_dir(tmp.file("rec"));
  write_record_file(tmp.file("rec/train.rec"), *make_sample_source(full.train));
  write_record_file(tmp.file("rec/test.rec"), *make_sample_source(full.test));
  const OpenedDataset rec = open_dataset("records:" + tmp.file("rec"));
  ASSERT_TRUE(rec.streamed);
  EXPECT_EQ(rec.train->size(), 6);
  EXPECT_EQ(rec.train->read(4, px.data()), 1);
  EXPECT_TRUE(std::equal(px.begin(), px.end(), full.train.inputs[4].data_ptr<uint8_t>()));
  EXPECT_TRUE(rec.splits.test.inputs.equal(full.test.inputs));
  EXPECT_DOUBLE_EQ(rec.splits.normalize_mean, full.normalize_mean);

  EXPECT_TRUE(contains(error_of([&] { open_dataset("records:" + tmp.file("nope")); }),
                       "not found"));

  // A corrupt training image is named with its sample: here by the statistics pass, which reads
  // every image of so small a split (a large one meets it when the loader reads it).
  write_bytes(tmp.file("pets/train/dog/2.png"), {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'});
  EXPECT_TRUE(contains(error_of([&] { open_dataset("folder:" + tmp.file("pets") + "@6x8x3"); }),
                       "image: " + tmp.file("pets/train/dog/2.png") +
                           " (sample 5): corrupt PNG"));
}

}  // namespace
}  // namespace saturate
