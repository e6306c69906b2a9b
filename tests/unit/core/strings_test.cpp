// SPDX-License-Identifier: Apache-2.0
#include "saturate/core/strings.h"

#include <gtest/gtest.h>

namespace saturate {

TEST(EditDistance, CountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("train", "trian"), 2u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(DidYouMean, SuggestsAClosePlausibleTypo) {
  EXPECT_EQ(did_you_mean("fmnist-cn", {"mlp", "fmnist-cnn"}), "; did you mean 'fmnist-cnn'?");
  EXPECT_EQ(did_you_mean("--batchsize", {"--batch-size", "--lr"}),
            "; did you mean '--batch-size'?");
}

TEST(DidYouMean, ListsTheChoicesWhenNothingIsClose) {
  EXPECT_EQ(did_you_mean("resnet152", {"mlp", "fmnist-cnn"}), "; expected one of: mlp, fmnist-cnn");
}

}  // namespace saturate
