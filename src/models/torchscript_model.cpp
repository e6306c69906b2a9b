// SPDX-License-Identifier: Apache-2.0
// TorchScript modules loaded from a file and trained in place.
#include <sys/stat.h>

#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "models/sequential_model.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"

namespace saturate::detail {
namespace {


class TorchScriptModel : public Model {
 public:
  TorchScriptModel(std::string path, torch::jit::Module module, int64_t num_classes)
      : path_(std::move(path)), module_(std::move(module)), num_classes_(num_classes) {}

  std::string name() const override { return "torchscript:" + path_; }

  at::Tensor forward(const at::Tensor& inputs) override {
    c10::IValue out;
    try {
      out = module_.forward({inputs});
    } catch (const c10::Error& e) {
      if (checked_) throw;  // a failure mid-training is LibTorch's to report
      SATURATE_CHECK(false, "model: ", path_, ": forward failed on input ", inputs.sizes(), ": ",
                     first_line(e.what_without_backtrace()));
    }
    SATURATE_CHECK(out.isTensor(), "model: ", path_,
                   ": forward must return a tensor of logits, got ", out.tagKind());
    at::Tensor logits = out.toTensor();
    if (!checked_) {
      SATURATE_CHECK(logits.dim() == 2 && logits.size(0) == inputs.size(0) &&
                         logits.size(1) == num_classes_,
                     "model: ", path_, ": forward returned shape ", logits.sizes(), "; expected [",
                     inputs.size(0), ", ", num_classes_, "] (logits for ", num_classes_,
                     " classes)");
      checked_ = true;
    }
    return logits;
  }

  std::vector<at::Tensor> parameters() override {
    std::vector<at::Tensor> out;
    for (const auto& p : module_.parameters()) out.push_back(p);
    return out;
  }

  std::vector<at::Tensor> state_tensors() override {
    std::vector<at::Tensor> out = parameters();
    for (const auto& b : module_.buffers()) out.push_back(b);
    return out;
  }

  void train(bool on) override { module_.train(on); }
  bool is_training() const override { return module_.is_training(); }
  void to(const c10::Device& device) override { module_.to(device); }

 private:
  std::string path_;
  torch::jit::Module module_;
  int64_t num_classes_;
  bool checked_ = false;
};

}  // namespace

std::unique_ptr<Model> load_torchscript(const std::string& path, const ModelInputs& inputs) {
  struct stat st {};
  // POSIX stat: std::filesystem calls resolve to the torch wheel's own copies (see TempDir).
  SATURATE_CHECK(stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode), "model: ", path,
                 ": no such file (expected a TorchScript module saved with torch.jit.save)");
  // The profiling executor's fusers can bypass autocast and change gradients between versions;
  // plain interpretation keeps training numerics predictable.
  torch::jit::setGraphExecutorOptimize(false);
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const c10::Error& e) {
    SATURATE_CHECK(false, "model: ", path, ": not a loadable TorchScript file: ",
                   first_line(e.what_without_backtrace()));
  }
  auto model = std::make_unique<TorchScriptModel>(path, std::move(module), inputs.num_classes);
  SATURATE_CHECK(!model->parameters().empty(), "model: ", path,
                 ": has no parameters to train");
  return model;
}

}  // namespace saturate::detail
