// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/dataset.h"

#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/data/idx_reader.h"

namespace saturate {
namespace {

constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
constexpr char kFashionMnistDirEnv[] = "SATURATE_FASHION_MNIST_DIR";
constexpr char kMnistDir[] = "/usr/share/datasets/mnist";
constexpr char kIdxPrefix[] = "idx:";

struct SplitFiles {
  const char* images;
  const char* labels;
};
constexpr SplitFiles kTrainFiles = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"};
constexpr SplitFiles kTestFiles = {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

struct ResolvedSpec {
  std::string label;  // dataset name used in TensorDataset::name and messages
  std::string dir;
  std::string missing_hint;  // appended when the folder does not exist
};

// POSIX stat rather than std::filesystem: LibTorch wheels export their own copies of the
// std::filesystem functions, built against a newer libstdc++, and those win symbol resolution.
bool is_folder(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool is_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// Last component of a folder path, ignoring trailing slashes: "/data/mnist/" -> "mnist".
std::string folder_name(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

ResolvedSpec resolve_spec(const std::string& spec) {
  if (spec == "fashion-mnist") {
    const char* env = std::getenv(kFashionMnistDirEnv);
    const bool has_env = env != nullptr && env[0] != '\0';
    return {spec, has_env ? env : kFashionMnistDir,
            has_env ? detail::concat(" (from $", kFashionMnistDirEnv, ")")
                    : detail::concat("; set $", kFashionMnistDirEnv, " or use idx:DIR")};
  }
  if (spec == "mnist") return {spec, kMnistDir, "; use idx:DIR for a copy elsewhere"};
  if (spec.rfind(kIdxPrefix, 0) == 0) {
    std::string dir = spec.substr(std::strlen(kIdxPrefix));
    SATURATE_CHECK(!dir.empty(), "data: '", spec,
                   "' needs a folder after the colon, e.g. idx:/data/mnist");
    const std::string label = folder_name(dir);
    return {label.empty() ? "idx" : label, dir, ""};
  }
  SATURATE_CHECK(!is_folder(spec), "data: unknown dataset '", spec,
                 "'; to load an MNIST-layout folder use idx:", spec);
  SATURATE_CHECK(false, "data: unknown dataset '", spec, "'",
                 did_you_mean(spec, dataset_spec_examples()));
  return {};
}

std::string join_path(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// `base` or `base.gz` inside `dir`, preferring the plain file; nullopt when neither exists.
std::optional<std::string> find_split_file(const std::string& dir, const std::string& base) {
  for (const std::string& path : {join_path(dir, base), join_path(dir, base + ".gz")}) {
    if (is_file(path)) return path;
  }
  return std::nullopt;
}

// Reader errors already name the file; the spec says which dataset was being loaded.
IdxArray read_split_file(const std::string& label, const std::string& path) {
  try {
    return read_idx(path);
  } catch (const Error& e) {
    throw Error(detail::concat("data: ", label, ": ", e.what()));
  }
}

const char* type_name(IdxType type) {
  switch (type) {
    case IdxType::kUInt8:
      return "uint8";
    case IdxType::kInt8:
      return "int8";
    case IdxType::kInt16:
      return "int16";
    case IdxType::kInt32:
      return "int32";
    case IdxType::kFloat32:
      return "float32";
    case IdxType::kFloat64:
      return "float64";
  }
  return "unknown";
}

// Labels are uint8, so "every label < 256" holds by construction once the type is checked.
TensorDataset make_split(const std::string& name, const std::string& images_path,
                         const IdxArray& images, const std::string& labels_path,
                         const IdxArray& labels) {
  SATURATE_CHECK(images.type == IdxType::kUInt8 && images.dims.size() == 3, "data: ", images_path,
                 ": expected images as a 3-dimensional uint8 IDX array (count x height x width), "
                 "found a ",
                 images.dims.size(), "-dimensional ", type_name(images.type), " array");
  SATURATE_CHECK(labels.type == IdxType::kUInt8 && labels.dims.size() == 1, "data: ", labels_path,
                 ": expected labels as a 1-dimensional uint8 IDX array, found a ",
                 labels.dims.size(), "-dimensional ", type_name(labels.type), " array");
  const int64_t count = images.dims[0];
  SATURATE_CHECK(count == labels.dims[0], "data: image and label counts differ: ", images_path,
                 " has ", count, " images, ", labels_path, " has ", labels.dims[0], " labels");

  TensorDataset split;
  split.name = name;
  split.inputs = torch::empty({count, 1, images.dims[1], images.dims[2]}, torch::kUInt8);
  std::memcpy(split.inputs.data_ptr<uint8_t>(), images.data.data(), images.data.size());
  split.targets = torch::empty({count}, torch::kInt64);
  int64_t* targets = split.targets.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) targets[i] = labels.data[static_cast<size_t>(i)];
  return split;
}

int64_t max_label(const IdxArray& labels) {
  uint8_t max = 0;
  for (uint8_t l : labels.data) max = std::max(max, l);
  return max;
}

// Exact mean and population std of pixels / 255, from a histogram (no float accumulation drift).
std::pair<double, double> pixel_stats(const IdxArray& images) {
  std::array<uint64_t, 256> histogram{};
  for (uint8_t p : images.data) ++histogram[p];
  const auto n = static_cast<double>(images.data.size());
  double sum = 0.0, sum_sq = 0.0;
  for (int v = 0; v < 256; ++v) {
    const double x = v / 255.0;
    sum += x * static_cast<double>(histogram[v]);
    sum_sq += x * x * static_cast<double>(histogram[v]);
  }
  const double mean = sum / n;
  const double std = std::sqrt(std::max(0.0, sum_sq / n - mean * mean));
  // Constant images have no spread to normalise; 1.0 keeps BatchIterator's division finite.
  return {mean, std > 0.0 ? std : 1.0};
}

}  // namespace

int64_t TensorDataset::size() const { return inputs.defined() ? inputs.size(0) : 0; }

std::vector<int64_t> TensorDataset::sample_shape() const {
  if (!inputs.defined()) return {};
  const auto sizes = inputs.sizes();
  return {sizes.begin() + 1, sizes.end()};
}

std::vector<std::string> dataset_spec_examples() { return {"fashion-mnist", "mnist", "idx:DIR"}; }

DatasetSplits load_dataset(const std::string& spec) {
  const ResolvedSpec resolved = resolve_spec(spec);
  const std::string& label = resolved.label;
  SATURATE_CHECK(is_folder(resolved.dir), "data: ", spec, ": folder ", resolved.dir, " not found",
                 resolved.missing_hint);

  std::vector<std::string> missing;
  std::array<std::string, 4> paths;
  const std::array<const char*, 4> bases = {kTrainFiles.images, kTrainFiles.labels,
                                            kTestFiles.images, kTestFiles.labels};
  for (size_t i = 0; i < bases.size(); ++i) {
    const auto found = find_split_file(resolved.dir, bases[i]);
    if (found)
      paths[i] = *found;
    else
      missing.push_back(std::string(bases[i]) + "[.gz]");
  }
  SATURATE_CHECK(missing.empty(), "data: ", spec, ": folder ", resolved.dir, " lacks ",
                 join(missing, ", "));

  const IdxArray train_images = read_split_file(spec, paths[0]);
  const IdxArray train_labels = read_split_file(spec, paths[1]);
  const IdxArray test_images = read_split_file(spec, paths[2]);
  const IdxArray test_labels = read_split_file(spec, paths[3]);

  DatasetSplits splits;
  splits.train = make_split(label + "/train", paths[0], train_images, paths[1], train_labels);
  splits.test = make_split(label + "/test", paths[2], test_images, paths[3], test_labels);
  SATURATE_CHECK(
      train_images.dims[1] == test_images.dims[1] && train_images.dims[2] == test_images.dims[2],
      "data: image sizes differ: ", paths[0], " has ", train_images.dims[1], "x",
      train_images.dims[2], " images, ", paths[2], " has ", test_images.dims[1], "x",
      test_images.dims[2]);

  const int64_t num_classes = std::max(max_label(train_labels), max_label(test_labels)) + 1;
  SATURATE_CHECK(num_classes >= 2, "data: ", spec, ": every label is 0 in ", paths[1], " and ",
                 paths[3], "; classification needs at least 2 classes");
  splits.train.num_classes = splits.test.num_classes = num_classes;

  std::tie(splits.normalize_mean, splits.normalize_std) = pixel_stats(train_images);
  splits.description = detail::concat(
      label, " (", resolved.dir, "): ", splits.train.size(), " train, ", splits.test.size(),
      " test, 1x", train_images.dims[1], "x", train_images.dims[2], ", ", num_classes, " classes");
  return splits;
}

}  // namespace saturate
