// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/image_folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

#include "data/file_bytes.h"
#include "data/image_decode.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"

namespace saturate {
namespace {

// Largest accepted side of the decoded size: a typo ("28x2800x1") should not allocate gigabytes.
constexpr int64_t kMaxSide = 4096;

std::string join_path(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// POSIX rather than std::filesystem: see dataset.cpp on LibTorch's broken exported copies.
// Sorted names of the entries of `dir`, hidden ones left out.
std::vector<std::string> list_folder(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  SATURATE_CHECK(d != nullptr, "image: ", dir, ": cannot open folder: ", std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(d)) {
    if (entry->d_name[0] != '.') names.emplace_back(entry->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool is_folder(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// "jpeg" or "png" for a supported extension (any case), nullptr otherwise.
const char* image_kind(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return nullptr;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == "jpg" || ext == "jpeg") return "jpeg";
  if (ext == "png") return "png";
  return nullptr;
}

}  // namespace

ImageFolderSource::ImageFolderSource(const std::string& dir, const ImageFolderOptions& options)
    : dir_(dir), options_(options) {
  SATURATE_CHECK(options.channels == 1 || options.channels == 3, "image: ", dir,
                 ": channels must be 1 or 3, got ", options.channels);
  SATURATE_CHECK(options.height >= 1 && options.height <= kMaxSide && options.width >= 1 &&
                     options.width <= kMaxSide,
                 "image: ", dir, ": size must be 1..", kMaxSide, " on each side, got ",
                 options.height, "x", options.width);
  SATURATE_CHECK(is_folder(dir), "image: folder ", dir, " not found");
  std::vector<std::string> class_dirs;
  for (const std::string& name : list_folder(dir)) {
    if (is_folder(join_path(dir, name))) class_dirs.push_back(name);
  }
  SATURATE_CHECK(!class_dirs.empty(), "image: ", dir,
                 " has no class sub-folders; expected DIR/<class>/*.jpg|*.jpeg|*.png");
  classes_ = options.classes.empty() ? class_dirs : options.classes;
  for (const std::string& name : class_dirs) {
    const auto found = std::find(classes_.begin(), classes_.end(), name);
    SATURATE_CHECK(found != classes_.end(), "image: ", join_path(dir, name), ": class '", name,
                   "' is not one of the ", classes_.size(), " training classes (",
                   join(classes_, ", "), ")");
    const auto label = static_cast<int64_t>(found - classes_.begin());
    const std::string class_dir = join_path(dir, name);
    size_t images = 0;
    for (const std::string& file : list_folder(class_dir)) {
      if (image_kind(file) == nullptr) continue;
      paths_.push_back(join_path(class_dir, file));
      labels_.push_back(label);
      ++images;
    }
    SATURATE_CHECK(images > 0, "image: class folder ", class_dir,
                   " holds no .jpg, .jpeg or .png files");
  }
}

int64_t ImageFolderSource::size() const { return static_cast<int64_t>(paths_.size()); }

std::vector<int64_t> ImageFolderSource::sample_shape() const {
  return {options_.channels, options_.height, options_.width};
}

int64_t ImageFolderSource::num_classes() const { return static_cast<int64_t>(classes_.size()); }

const std::string& ImageFolderSource::path(int64_t index) const {
  SATURATE_CHECK(index >= 0 && index < size(), "image: ", dir_, ": sample ", index,
                 " out of range [0, ", size(), ")");
  return paths_[static_cast<size_t>(index)];
}

int64_t ImageFolderSource::read(int64_t index, uint8_t* pixels) const {
  const std::string& file = path(index);
  try {
    const std::vector<uint8_t> bytes = detail::read_file_bytes(file, "image");
    const detail::DecodedImage image = detail::decode_image(
        bytes.data(), bytes.size(), static_cast<int>(options_.channels), image_kind(file));
    detail::resize_to_chw(image, options_.height, options_.width, pixels);
  } catch (const Error& e) {
    // read_file_bytes names the file already; decode errors give the reason alone.
    std::string reason = e.what();
    const std::string prefix = "image: " + file + ": ";
    if (reason.rfind(prefix, 0) == 0) reason = reason.substr(prefix.size());
    throw Error(detail::concat("image: ", file, " (sample ", index, "): ", reason));
  }
  return labels_[static_cast<size_t>(index)];
}

std::string ImageFolderSource::describe() const {
  return detail::concat(dir_, " (", size(), " images, ", num_classes(), " classes, decoded to ",
                        options_.channels, "x", options_.height, "x", options_.width, ")");
}

ImageFolderSplits open_image_folder_splits(const std::string& dir,
                                           const ImageFolderOptions& options) {
  ImageFolderSplits splits;
  splits.train = std::make_unique<ImageFolderSource>(join_path(dir, "train"), options);
  ImageFolderOptions test_options = options;
  test_options.classes = splits.train->classes();
  splits.test = std::make_unique<ImageFolderSource>(join_path(dir, "test"), test_options);
  return splits;
}

void parse_image_size(const std::string& text, const std::string& what,
                      ImageFolderOptions& options) {
  int64_t values[3] = {0, 0, 0};
  size_t pos = 0;
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i) {
    const size_t start = pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])) &&
           pos - start < 6) {
      values[i] = values[i] * 10 + (text[pos] - '0');
      ++pos;
    }
    ok = pos > start && (i == 2 ? pos == text.size() : pos < text.size() && text[pos] == 'x');
    ++pos;
  }
  SATURATE_CHECK(ok, what, ": image size '", text, "' is not HxWxC, e.g. 32x32x3 or 28x28x1");
  SATURATE_CHECK(values[2] == 1 || values[2] == 3, what, ": image size '", text, "' has ",
                 values[2], " channels; use 1 (grey) or 3 (RGB)");
  SATURATE_CHECK(values[0] >= 1 && values[0] <= kMaxSide && values[1] >= 1 && values[1] <= kMaxSide,
                 what, ": image size '", text, "' must be 1..", kMaxSide, " on each side");
  options.height = values[0];
  options.width = values[1];
  options.channels = values[2];
}

}  // namespace saturate
