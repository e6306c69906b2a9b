// SPDX-License-Identifier: Apache-2.0
// saturate pack: convert any dataset spec into OUT/train.rec and OUT/test.rec (record files),
// so training reads memory-mapped samples instead of parsing or decoding them every epoch.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>

#include "command.h"
#include "saturate/core/temp_folder.h"
#include "saturate/core/error.h"
#include "saturate/core/units.h"
#include "saturate/data/dataset.h"
#include "saturate/data/image_folder.h"
#include "saturate/data/record_file.h"
#include "saturate/data/sample_source.h"

namespace saturate::cli {
namespace {

constexpr char kFolderPrefix[] = "folder:";

std::string join_path(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// OUT, created with any missing folders above it.
void make_out_folder(const std::string& out) { make_folders(out, "pack: OUT folder"); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "x" : "") + std::to_string(shape[i]);
  return text;
}

void pack_split(const std::string& path, const SampleSource& source) {
  const auto t0 = std::chrono::steady_clock::now();
  const RecordFileHeader h = write_record_file(path, source);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "  " << path << "  " << h.sample_count << " samples, "
            << shape_text(source.sample_shape()) << ", " << h.num_classes << " classes, "
            << format_bytes(h.file_bytes()) << " in " << format_duration_s(seconds) << "\n";
}

}  // namespace

int run_pack(const std::vector<std::string>& args) {
  std::string src, out, size_text;
  CLI::App app{
      "Convert a dataset to record files OUT/train.rec and OUT/test.rec; then train with "
      "--data records:OUT.",
      "saturate pack"};
  app.add_option("SRC", src,
                 "dataset spec: fashion-mnist, mnist, idx:DIR, cifar10:DIR, cifar100:DIR, "
                 "npy:DIR, records:DIR or folder:DIR[@HxWxC]")
      ->required();
  app.add_option("OUT", out, "output folder, created if missing")->required();
  app.add_option("--size", size_text,
                 "HxWxC every image of a folder: spec is decoded to (default 32x32x3)");
  if (!parse_args(app, args)) return 0;

  const bool is_folder_spec = src.rfind(kFolderPrefix, 0) == 0;
  SATURATE_CHECK(size_text.empty() || is_folder_spec,
                 "pack: --size applies to folder: specs only, not '", src, "'");
  // Open the sources first (a folder: spec only lists its files), then OUT, so that a bad
  // spec leaves no folder behind and an unwritable OUT fails before any decoding.
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<SampleSource> train, test;
  DatasetSplits splits;
  if (is_folder_spec) {
    // Straight from the files: each image is decoded once, into the record file, and the
    // decoded set is never held in memory.
    std::string dir = src.substr(std::strlen(kFolderPrefix));
    ImageFolderOptions options;
    const size_t at = dir.rfind('@');
    if (at != std::string::npos) {
      parse_image_size(dir.substr(at + 1), "pack: " + src, options);
      dir.resize(at);
    }
    if (!size_text.empty()) parse_image_size(size_text, "pack: --size", options);
    SATURATE_CHECK(!dir.empty(), "pack: '", src, "' needs a folder after the colon");
    ImageFolderSplits folder = open_image_folder_splits(dir, options);
    SATURATE_CHECK(folder.train->num_classes() >= 2, "pack: ", folder.train->describe(),
                   " has 1 class folder; classification needs at least 2 classes");
    train = std::move(folder.train);
    test = std::move(folder.test);
  } else {
    splits = load_dataset(src);
    train = make_sample_source(splits.train);
    test = make_sample_source(splits.test);
  }
  make_out_folder(out);
  const std::string train_path = join_path(out, "train.rec");
  const std::string test_path = join_path(out, "test.rec");
  check_writable(train_path, "pack: OUT");
  check_writable(test_path, "pack: OUT");
  std::cout << "saturate pack: " << src << " -> " << out << "\n";
  pack_split(train_path, *train);
  pack_split(test_path, *test);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "  done in " << format_duration_s(seconds) << "; train with --data records:" << out
            << "\n";
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace saturate::cli
