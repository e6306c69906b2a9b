// SPDX-License-Identifier: Apache-2.0
// Precompiled for every torch-using translation unit; see cmake/SaturateTargets.cmake.
#pragma once
#include <torch/torch.h>
