// SPDX-License-Identifier: Apache-2.0
// The input pipeline train, profile and tune share: the held-out validation split is seeded,
// disjoint from what trains, and centre-cropped like the test split.
#include "saturate/data/training_input.h"

#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"

namespace saturate {

TEST(TrainingInput, Issue13_HoldsOutASeededValidationSplitNeverTrainedOn) {
  InputOptions in;
  in.data_spec = "synthetic:1,8,8,4,200";
  in.val_fraction = 0.1;
  in.val_seed = 3;
  const TrainingInput a = open_training_input(in, -1);
  ASSERT_EQ(a.splits.validation.size(), 20);
  ASSERT_EQ(a.source->size(), 180);
  // Synthetic labels are index % 4 and pixels depend on the index: compare samples by bytes.
  std::set<std::vector<uint8_t>> train, val;
  std::vector<uint8_t> px(static_cast<size_t>(a.source->sample_bytes()));
  for (int64_t i = 0; i < a.source->size(); ++i) {
    a.source->read(i, px.data());
    train.insert(px);
  }
  const at::Tensor v = a.splits.validation.inputs;
  for (int64_t i = 0; i < v.size(0); ++i) {
    const uint8_t* p = v[i].contiguous().data_ptr<uint8_t>();
    val.insert(std::vector<uint8_t>(p, p + px.size()));
  }
  for (const auto& s : val) EXPECT_EQ(train.count(s), 0u) << "a validation sample also trains";
  // Same seed, same split; another seed, another split.
  const TrainingInput b = open_training_input(in, -1);
  EXPECT_TRUE(torch::equal(a.splits.validation.inputs, b.splits.validation.inputs));
  in.val_seed = 4;
  const TrainingInput c = open_training_input(in, -1);
  EXPECT_FALSE(torch::equal(a.splits.validation.inputs, c.splits.validation.inputs));
}

TEST(TrainingInput, Issue13_ValidationIsCentreCroppedLikeTheTestSplit) {
  InputOptions in;
  in.data_spec = "synthetic:3,12,12,2,64";
  in.val_fraction = 0.25;
  in.crop = 8;
  const TrainingInput t = open_training_input(in, -1);
  EXPECT_EQ(t.sample_shape, (std::vector<int64_t>{3, 8, 8}));
  EXPECT_EQ(t.splits.validation.sample_shape(), (std::vector<int64_t>{3, 8, 8}));
}

TEST(TrainingInput, Issue13_RejectsImpossibleValidationFractions) {
  InputOptions in;
  in.data_spec = "synthetic:1,4,4,2,10";
  for (double f : {-0.1, 0.5, 0.9}) {
    in.val_fraction = f;
    EXPECT_THROW(open_training_input(in, -1), Error) << f;
  }
  in.val_fraction = 0.01;  // rounds to no sample of 10
  EXPECT_THROW(open_training_input(in, -1), Error);
}

}  // namespace saturate
