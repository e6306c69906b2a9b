// SPDX-License-Identifier: Apache-2.0
#pragma once
// Image folders: "DIR/<class>/*.{jpg,jpeg,png}" as a SampleSource. Classes are the sorted
// sub-folder names, files are sorted within each, and every image is decoded (libjpeg-turbo,
// libpng) and resized to one fixed size when read.
//
//   saturate::ImageFolderSource train("/data/pets/train", {/*height=*/64, /*width=*/64});
//   std::vector<uint8_t> px(train.sample_bytes());
//   int64_t label = train.read(17, px.data());   // index of the sample's class folder

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "saturate/data/sample_source.h"

namespace saturate {

struct ImageFolderOptions {
  int64_t height = 32;
  int64_t width = 32;
  /// 1 (grey) or 3 (RGB); colour images are converted to grey and grey ones to RGB.
  int64_t channels = 3;
  /// When not empty, the class names (label i is classes[i]) instead of the sub-folders found:
  /// a test split takes the train split's so that labels agree. Every sub-folder must be in it;
  /// a class may lack a folder.
  std::vector<std::string> classes;
};

/// A SampleSource over an image folder. The constructor lists the files only; read() decodes
/// one image (JPEG or PNG, told apart by content) and resizes it with deterministic bilinear
/// interpolation (a copy when it already has the size).
class ImageFolderSource final : public SampleSource {
 public:
  /// Throws saturate::Error "image: ..." naming the path for a missing or unreadable folder, a
  /// folder without class sub-folders, a class folder without images, one not in
  /// options.classes, a folder with no images at all, or options out of range.
  ImageFolderSource(const std::string& dir, const ImageFolderOptions& options = {});

  int64_t size() const override;
  std::vector<int64_t> sample_shape() const override;
  int64_t num_classes() const override;
  /// Thread-safe (each call has its own decoder). Throws saturate::Error
  /// "image: PATH (sample N): <reason>" for a file that cannot be read or decoded.
  int64_t read(int64_t index, uint8_t* pixels) const override;
  /// "DIR (1200 images, 10 classes, decoded to 3x32x32)".
  std::string describe() const override;

  const std::vector<std::string>& classes() const { return classes_; }
  /// Path of sample `index`.
  const std::string& path(int64_t index) const;

 private:
  std::string dir_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
};

/// The two splits of a "folder:" dataset: DIR/train and DIR/test, the test split labelled by
/// the train split's classes.
struct ImageFolderSplits {
  std::unique_ptr<ImageFolderSource> train, test;
};
ImageFolderSplits open_image_folder_splits(const std::string& dir,
                                           const ImageFolderOptions& options = {});

/// Parses "HxWxC" (e.g. "28x28x1") into the size fields of `options`. Throws saturate::Error
/// "<what>: ..." naming the text for anything else, or C not 1 or 3.
void parse_image_size(const std::string& text, const std::string& what,
                      ImageFolderOptions& options);

}  // namespace saturate
