// SPDX-License-Identifier: Apache-2.0
#pragma once
// A trained model's weights in the safetensors format (an 8-byte little-endian header length, a
// JSON header naming each tensor's dtype, shape and byte range, then the bytes), which Python
// reads with `safetensors.torch.load_file` straight into `module.load_state_dict` (the names
// are PyTorch's state_dict names for the same layers). The header's __metadata__ says how to
// rebuild and feed the model: its spec, its inputs and the input normalisation.
//
//   save_model(*model, "model.safetensors", info);        // after `train`
//   auto m = make_model("model.safetensors", inputs);      // the same layers, these weights

#include <cstdint>
#include <string>
#include <vector>

#include "saturate/models/model.h"

namespace saturate {

struct SavedModelInfo {
  std::string model;  ///< the spec it was built from: "mlp", "gpt-mini:layers=2"
  std::string data;   ///< the data spec it was trained on
  std::vector<int64_t> sample_shape;
  int64_t num_classes = 0;  ///< classes, or the vocabulary of a language model
  bool tokens = false;      ///< takes token windows
  /// Images are fed as (pixel / 255 - mean) / std.
  double normalize_mean = 0.0, normalize_std = 1.0;
  int64_t steps = 0;  ///< optimizer steps it was trained for
};

/// Whether a --model spec names a saved model (a path ending in .safetensors).
bool is_saved_model_path(const std::string& spec);

/// Writes every state tensor of `model` (Model::named_state, on the CPU) and `info`, atomically
/// (temporary file, fsync, rename). Throws saturate::Error naming the path when it cannot.
/// `state`, when given, is written instead of `model`'s own: a model split over processes,
/// gathered whole.
void save_model(Model& model, const std::string& path, const SavedModelInfo& info,
                const std::vector<std::pair<std::string, at::Tensor>>* state = nullptr);

/// The metadata of a saved model. Throws saturate::Error naming the file and the field for a
/// missing, truncated or malformed file (every size and offset is checked against the file's
/// before anything is read), or one that saturate did not write.
SavedModelInfo read_saved_model_info(const std::string& path);

/// Copies the file's tensors into `model`'s state by name. Throws saturate::Error naming the
/// tensor for one the file lacks, one of another shape, or one the model does not have.
void load_saved_weights(Model& model, const std::string& path);

}  // namespace saturate
