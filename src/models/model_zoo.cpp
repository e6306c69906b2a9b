// SPDX-License-Identifier: Apache-2.0
#include <torch/torch.h>

#include "models/sequential_model.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"
#include "saturate/models/model.h"

namespace saturate {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> builtin_model_names() {
  return {"fmnist-cnn", "mlp", "mlp-deep", "resnet18-cifar"};
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
  if (spec == "fmnist-cnn") return detail::make_fmnist_cnn(inputs);
  if (spec == "mlp") return detail::make_mlp(inputs);
  if (spec == "mlp-deep") return detail::make_mlp_deep(inputs);
  if (spec == "resnet18-cifar") return detail::make_resnet18_cifar(inputs);
  const std::string prefix = "torchscript:";
  if (spec.rfind(prefix, 0) == 0) return detail::load_torchscript(spec.substr(prefix.size()), inputs);
  if (ends_with(spec, ".pt") || ends_with(spec, ".pth")) return detail::load_torchscript(spec, inputs);
  auto names = builtin_model_names();
  names.push_back("torchscript:PATH");
  SATURATE_CHECK(false, "model: unknown model '", spec, "'", did_you_mean(spec, names));
  return nullptr;
}

}  // namespace saturate
