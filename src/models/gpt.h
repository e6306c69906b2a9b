// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private: the GPT language models ("gpt-mini", "gpt-small", with sizes as options).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "saturate/models/model.h"

namespace saturate::detail {

struct GptConfig {
  int64_t layers = 4, heads = 4, width = 128, context = 256;
  double dropout = 0.0;
  int64_t vocab = 257;
  int64_t seq_len = 128;  ///< the windows it is trained on (FLOPs per sample)
};

/// "gpt-mini[:layers=L,heads=H,width=C,context=N,dropout=P]" (4/4/128, context 256) or
/// "gpt-small[:...]" (nanoGPT's character model: 6/6/384, context 256). Throws
/// saturate::Error naming the option for a malformed or impossible one.
GptConfig parse_gpt_spec(const std::string& spec, const ModelInputs& inputs);
bool is_gpt_spec(const std::string& spec);

/// A decoder-only transformer: token and position embeddings, pre-norm blocks (LayerNorm,
/// causal self-attention through at::scaled_dot_product_attention, LayerNorm, GELU MLP of
/// 4 × width), a final LayerNorm and an output layer tied to the token embedding. Parameter names
/// and initialisation follow nanoGPT (normal(0, 0.02), residual projections 0.02 / sqrt(2L),
/// zero biases). forward(tokens int64 [B, T]) returns logits [B, T, vocab].
std::unique_ptr<Model> make_gpt(const std::string& spec, const ModelInputs& inputs);

/// The attention kernel SDPA picks for these shapes on `device` ("flash", "math", ...); in
/// training, dropout counts (CPU's flash kernel takes none).
std::string sdpa_backend_for(const GptConfig& c, int64_t batch, const c10::Device& device,
                             c10::ScalarType dtype, bool training);

}  // namespace saturate::detail
