// SPDX-License-Identifier: Apache-2.0
// Saved models: the weights come back bit for bit under PyTorch's names, and a damaged or
// mismatched file is refused naming the problem before anything is allocated from its header.
#include "saturate/models/saved_model.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/core/temp_folder.h"

namespace saturate {
namespace {

const ModelInputs kImages{{1, 28, 28}, 4, false};

SavedModelInfo info_for(const std::string& model) {
  SavedModelInfo i;
  i.model = model;
  i.data = "idx:somewhere";
  i.sample_shape = {1, 28, 28};
  i.num_classes = 4;
  i.normalize_mean = 0.2860405969887955;
  i.normalize_std = 0.3530242445149223;
  i.steps = 7;
  return i;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& b) {
  std::ofstream(path, std::ios::binary) << b;
}

std::string error_of(const std::string& path, const ModelInputs& in = kImages) {
  try {
    make_model(path, in);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(SavedModel, Issue16_WeightsComeBackBitForBitUnderPyTorchsNames) {
  TempFolder tmp("saturate-saved", "test");
  torch::manual_seed(5);
  auto a = make_model("fmnist-cnn", kImages);
  std::vector<std::string> names;
  for (const auto& [name, t] : a->named_state()) names.push_back(name);
  const std::vector<std::string> pytorch = {"0.weight", "0.bias", "3.weight", "3.bias",
                                            "7.weight", "7.bias", "9.weight", "9.bias"};
  EXPECT_EQ(names, pytorch);
  const std::string path = tmp.file("m.safetensors");
  save_model(*a, path, info_for("fmnist-cnn"));
  const SavedModelInfo back = read_saved_model_info(path);
  EXPECT_EQ(back.model, "fmnist-cnn");
  EXPECT_EQ(back.sample_shape, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(back.normalize_mean, 0.2860405969887955);  // %.17g: the double exactly
  EXPECT_EQ(back.steps, 7);
  torch::manual_seed(6);  // another initialisation: the file's weights must replace it
  auto b = make_model(path, kImages);
  const auto sa = a->state_tensors(), sb = b->state_tensors();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(torch::equal(sa[i], sb[i])) << names[i];
  // The 8-byte header length, then JSON starting with '{', data 8-byte aligned.
  const std::string raw = bytes_of(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(raw[8], '{');
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST(SavedModel, Issue16_DamagedOrMismatchedFilesAreRefusedNamingTheProblem) {
  TempFolder tmp("saturate-saved", "test");
  auto a = make_model("mlp", kImages);
  const std::string good = tmp.file("m.safetensors");
  save_model(*a, good, info_for("mlp"));
  const std::string raw = bytes_of(good);
  auto damaged = [&](const std::string& name, const std::string& bytes) {
    write_bytes(tmp.file(name), bytes);
    return error_of(tmp.file(name));
  };
  EXPECT_NE(damaged("a.safetensors", raw.substr(0, 5)).find("truncated"), std::string::npos);
  std::string huge = raw;
  huge[7] = '\x7f';  // a header length of about 9e18 bytes
  EXPECT_NE(damaged("b.safetensors", huge).find("does not fit"), std::string::npos);
  EXPECT_NE(damaged("c.safetensors", raw.substr(0, raw.size() - 4)).find("data_offsets"),
            std::string::npos);
  // A tensor renamed in the header: the model's is missing and the file's is foreign.
  std::string renamed = raw;
  const size_t at = renamed.find("\"1.weight\"");
  ASSERT_NE(at, std::string::npos);
  renamed[at + 1] = '8';
  EXPECT_NE(damaged("d.safetensors", renamed).find("no tensor '1.weight'"), std::string::npos);
  // Other inputs than it was trained on: named with both.
  const std::string other = error_of(good, ModelInputs{{3, 32, 32}, 4, false});
  EXPECT_NE(other.find("was trained on 1x28x28 samples, 4 classes"), std::string::npos) << other;
  EXPECT_NE(other.find("this data has 3x32x32 samples"), std::string::npos) << other;
  EXPECT_NE(error_of(tmp.file("absent.safetensors")).find("cannot open"), std::string::npos);
}

}  // namespace saturate
