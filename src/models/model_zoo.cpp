// SPDX-License-Identifier: Apache-2.0
#include <algorithm>

#include <torch/torch.h>

#include "models/gpt.h"
#include "models/sequential_model.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/data/training_input.h"
#include "saturate/models/model.h"

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

int64_t count_parameters(Model& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

std::unique_ptr<Model> make_model(const std::string& spec, const ModelInputs& inputs) {
  SATURATE_CHECK(inputs.num_classes >= 2, "model: need at least 2 classes, got ",
                 inputs.num_classes);
  for (int64_t s : inputs.sample_shape)
    SATURATE_CHECK(s > 0, "model: sample shape has a non-positive dimension (", s, ")");
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
