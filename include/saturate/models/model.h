// SPDX-License-Identifier: Apache-2.0
#pragma once
// Model: one interface for the built-in zoo and TorchScript modules loaded from a file, so the
// trainer, the tuner and the tools never care which one they hold.
//
//   auto model = saturate::make_model("fmnist-cnn", {/*shape=*/{1, 28, 28}, /*classes=*/10});
//   model->to(device);
//   at::Tensor logits = model->forward(batch.inputs);

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace saturate {

/// What a model is built for: the per-sample input shape and the number of classes.
struct ModelInputs {
  std::vector<int64_t> sample_shape;  ///< {C, H, W} for images, {D} for vectors, {T} for text
  int64_t num_classes = 10;           ///< the vocabulary for text
  bool tokens = false;                ///< int64 token windows [B, T] (text:PATH data)
};

/// A classification model: forward(inputs) returns logits [B, num_classes]; a language model
/// (gpt-mini, gpt-small) maps token windows [B, T] to next-token logits [B, T, vocab].
/// Not thread-safe; one training thread owns it.
class TensorParallelGroup;

class Model {
 public:
  virtual ~Model() = default;
  /// A built-in name (see builtin_model_names()) or "torchscript:<path>".
  virtual std::string name() const = 0;
  virtual at::Tensor forward(const at::Tensor& inputs) = 0;
  /// Trainable parameters, in a stable order (the optimizer and saved training state rely on it).
  virtual std::vector<at::Tensor> parameters() = 0;
  /// parameters() with their names ("h.0.attn.c_attn.weight"); "param.N" where a model has
  /// none.
  virtual std::vector<std::pair<std::string, at::Tensor>> named_parameters();
  /// Every tensor of the model's state (parameters and buffers), in a stable order.
  virtual std::vector<at::Tensor> state_tensors() = 0;
  /// state_tensors() by name, as PyTorch's state_dict() names them for the same layers
  /// ("1.weight" of a Sequential, "h.0.ln_1.weight" of a GPT): what a saved model holds.
  /// The default: named_parameters(), then the other state tensors as "buffer.N".
  virtual std::vector<std::pair<std::string, at::Tensor>> named_state();
  virtual void train(bool on = true) = 0;
  virtual bool is_training() const = 0;
  /// Moves parameters and buffers. Build the optimizer after this, not before.
  virtual void to(const c10::Device& device) = 0;
  /// Forward FLOPs per sample (multiply-add = 2), 0 when unknown (TorchScript).
  virtual int64_t forward_flops_per_sample() const { return 0; }
  /// Splits the model into `segments` contiguous activation-recomputed segments (0 turns it
  /// off; more segments than layers clamp to one per layer): in training mode with grad on,
  /// forward then keeps only each segment's input and backward recomputes the rest
  /// (saturate::recompute), trading about one extra forward for activation memory. Returns
  /// false, changing nothing, when the model cannot (TorchScript); the built-ins can, and throw
  /// saturate::Error for a negative count.
  virtual bool set_recompute_segments(int64_t /*segments*/) { return false; }
  /// The segment count in effect after clamping; 0 when recomputation is off.
  virtual int64_t recompute_segments() const { return 0; }
  /// The attention kernel its last training forward ran ("flash", "efficient", "cudnn", "math");
  /// empty for models without attention or before the first forward.
  virtual std::string attention_kernel() const { return ""; }
  /// Tensor parallelism (models/tensor_parallel.h): splits the attention heads and the MLP's
  /// hidden columns over `group` (which must outlive the model), this rank keeping its share of
  /// those weights; everything else stays whole on every rank. Call once, with every rank's
  /// model built alike (the same seed), before the move to the device and the optimizer.
  /// Returns false, changing nothing, when the model cannot be split so (only the GPT can);
  /// saturate::Error when its heads or width do not divide by the group's size.
  virtual bool set_tensor_parallel(TensorParallelGroup* /*group*/) { return false; }
  /// Why set_tensor_parallel over `size` ranks would fail ("" when it would not): asked before
  /// the ranks form their group, so that every rank stops alike.
  virtual std::string tensor_parallel_problem(int size) const {
    (void)size;
    return name() + " cannot be split by tensor (the GPT can)";
  }
  /// Of a model split by tensor: its group, and its parameters that are shares (each rank holds
  /// another part; the rest are whole on every rank). A global gradient norm adds the shares'
  /// squares over the group and counts the whole parameters once. nullptr and none otherwise.
  virtual TensorParallelGroup* tensor_parallel_group() { return nullptr; }
  virtual std::vector<at::Tensor> tensor_parallel_shares() { return {}; }
  /// named_parameters() whole: a tensor-parallel model's shards gathered from every rank (a
  /// collective); the same tensors otherwise.
  virtual std::vector<std::pair<std::string, at::Tensor>> whole_named_parameters() {
    return named_parameters();
  }
  /// Model parallelism by layers: the number of layers the forward is a chain of, each taking
  /// the previous one's output (0: the model cannot be split).
  virtual int64_t pipeline_layers() const { return 0; }
  /// A model of layers [begin, end) of that chain, sharing this model's modules (so its
  /// parameters are this model's, under the same names); nullptr when the model cannot be
  /// split. Throws saturate::Error for an empty or out-of-range span.
  /// A model split by tensor first gives stages of its shares (a 3-D layout: each stage's
  /// tensor group is the model's).
  virtual std::unique_ptr<Model> pipeline_stage(int64_t /*begin*/, int64_t /*end*/) {
    return nullptr;
  }
  /// Whether layer `layer` of that chain is one set_tensor_parallel splits (its work and
  /// parameters divide over the group); false for layers that stay whole on every rank.
  virtual bool is_tensor_parallel_layer(int64_t /*layer*/) const { return false; }
  /// Of a pipeline stage: its parameters that the stage at the other end of the chain holds too,
  /// one weight used by the chain's first and last layers (the GPT's token embedding and output
  /// layer). The first and the last stage list them in the same order; the pipeline sums their
  /// gradients across the two, so the copies stay equal. Empty for most models, and for a stage
  /// that holds both ends.
  virtual std::vector<at::Tensor> pipeline_tied_parameters() { return {}; }
};

struct TrainingInput;
/// What a model built for `input` takes: its sample shape, classes (or vocabulary) and whether
/// the samples are token windows.
ModelInputs model_inputs_for(const TrainingInput& input);

/// Number of scalar parameters.
int64_t count_parameters(Model& model);

/// Builds a model from a spec: a built-in name ("mlp", "fmnist-cnn", "mlp-deep",
/// "resnet18-cifar", "gpt-mini[:OPTIONS]", "gpt-small[:OPTIONS]") or a TorchScript file
/// ("torchscript:PATH", or any PATH ending in .pt/.pth). Text data takes only the GPTs.
/// Throws saturate::Error for an unknown
/// name (with a suggestion), a missing or unreadable file, or inputs the model cannot take.
std::unique_ptr<Model> make_model(const std::string& spec, const ModelInputs& inputs);

/// The built-in names, for help text and suggestions.
std::vector<std::string> builtin_model_names();

}  // namespace saturate
