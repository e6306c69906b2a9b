// SPDX-License-Identifier: Apache-2.0
#include <algorithm>

#include <torch/torch.h>

#include "models/gpt.h"
#include "models/sequential_model.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/data/training_input.h"
#include "saturate/models/model.h"
#include "saturate/models/saved_model.h"

namespace saturate {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> builtin_model_names() {
  return {"fmnist-cnn", "mlp", "mlp-deep", "resnet18-cifar", "gpt-mini", "gpt-small"};
}

ModelInputs model_inputs_for(const TrainingInput& input) {
  return {input.sample_shape, input.num_classes, input.corpus != nullptr};
}

std::vector<std::pair<std::string, at::Tensor>> Model::named_parameters() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const at::Tensor& p : parameters()) out.emplace_back("param." + std::to_string(out.size()), p);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Model::named_state() {
  std::vector<std::pair<std::string, at::Tensor>> out = named_parameters();
  const std::vector<at::Tensor> all = state_tensors();
  for (size_t i = out.size(); i < all.size(); ++i)
    out.emplace_back("buffer." + std::to_string(i - out.size()), all[i]);
  return out;
}

int64_t count_parameters(Model& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

namespace {

std::string inputs_text(const std::vector<int64_t>& shape, int64_t classes, bool tokens) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return tokens ? "windows of " + s + " tokens, vocabulary " + std::to_string(classes)
                : s + " samples, " + std::to_string(classes) + " classes";
}

// A model `train --save-model` wrote: the layers its metadata names, on inputs like those it
// was trained on, with its weights.
std::unique_ptr<Model> load_saved_model(const std::string& path, const ModelInputs& inputs) {
  const SavedModelInfo info = read_saved_model_info(path);
  SATURATE_CHECK(!is_saved_model_path(info.model), "model: ", path, " names another saved model");
  const bool same = info.tokens == inputs.tokens && info.num_classes == inputs.num_classes &&
                    (inputs.tokens || info.sample_shape == inputs.sample_shape);
  SATURATE_CHECK(same, "model: ", path, " was trained on ",
                 inputs_text(info.sample_shape, info.num_classes, info.tokens), " (", info.data,
                 "); this data has ",
                 inputs_text(inputs.sample_shape, inputs.num_classes, inputs.tokens));
  std::unique_ptr<Model> model = make_model(info.model, inputs);
  load_saved_weights(*model, path);
  return model;
}

}  // namespace

std::unique_ptr<Model> make_model(const std::string& spec, const ModelInputs& inputs) {
  SATURATE_CHECK(inputs.num_classes >= 2, "model: need at least 2 classes, got ",
                 inputs.num_classes);
  for (int64_t s : inputs.sample_shape)
    SATURATE_CHECK(s > 0, "model: sample shape has a non-positive dimension (", s, ")");
  if (is_saved_model_path(spec)) return load_saved_model(spec, inputs);
  if (detail::is_gpt_spec(spec)) return detail::make_gpt(spec, inputs);
  const std::string prefix = "torchscript:";
  if (spec.rfind(prefix, 0) == 0) return detail::load_torchscript(spec.substr(prefix.size()), inputs);
  if (ends_with(spec, ".pt") || ends_with(spec, ".pth")) return detail::load_torchscript(spec, inputs);
  const auto names = builtin_model_names();
  SATURATE_CHECK(!inputs.tokens || std::find(names.begin(), names.end(), spec) == names.end(),
                 "model: ", spec, " takes images, not text; text data trains gpt-mini or gpt-small");
  if (spec == "fmnist-cnn") return detail::make_fmnist_cnn(inputs);
  if (spec == "mlp") return detail::make_mlp(inputs);
  if (spec == "mlp-deep") return detail::make_mlp_deep(inputs);
  if (spec == "resnet18-cifar") return detail::make_resnet18_cifar(inputs);
  std::vector<std::string> known = names;
  known.push_back("torchscript:PATH");
  SATURATE_CHECK(false, "model: unknown model '", spec, "'", did_you_mean(spec, known));
  return nullptr;
}

}  // namespace saturate
