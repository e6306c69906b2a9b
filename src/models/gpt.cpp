// SPDX-License-Identifier: Apache-2.0
#include "models/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <set>

#include <ATen/autocast_mode.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/core/log.h"
#include "saturate/models/recompute.h"
#include "saturate/models/tensor_parallel.h"

namespace saturate::detail {
namespace nn = torch::nn;
namespace F = torch::nn::functional;
namespace {

// Tensor parallel (Megatron's pair): a first Linear split by output rows, in `parts` blocks
// (q, k, v: 3), and a second split by input columns; rank r keeps share r of each block.

// Rank r's share of `t` along `dim`: share r of each of its `parts` equal blocks.
at::Tensor share_of(const at::Tensor& t, int64_t dim, int64_t parts, int size, int r) {
  const int64_t n = t.size(dim) / parts, c = n / size;
  std::vector<at::Tensor> pieces;
  for (int64_t part = 0; part < parts; ++part)
    pieces.push_back(t.slice(dim, part * n + r * c, part * n + (r + 1) * c));
  return at::cat(pieces, dim).clone();
}

// share_of's inverse over the group: each rank writes its share into zeros of the whole shape
// and the sum over the ranks fills the rest.
at::Tensor whole_of(const at::Tensor& share, int64_t dim, int64_t parts, TensorParallelGroup& tp) {
  const int64_t c = share.size(dim) / parts, n = c * tp.size();
  std::vector<int64_t> whole = share.sizes().vec();
  whole[static_cast<size_t>(dim)] = n * parts;
  at::Tensor out = torch::zeros(whole, share.options());
  const int r = tp.rank();
  for (int64_t part = 0; part < parts; ++part)
    out.slice(dim, part * n + r * c, part * n + (r + 1) * c)
        .copy_(share.slice(dim, part * c, (part + 1) * c));
  tp.all_reduce_sum(out);
  return out;
}

// The pair (first, second) cut down to this rank's share.
void split_pair(nn::Linear& first, nn::Linear& second, int64_t parts, TensorParallelGroup& group) {
  torch::NoGradGuard no_grad;
  const int n = group.size(), r = group.rank();
  first->weight.set_data(share_of(first->weight, 0, parts, n, r));
  first->bias.set_data(share_of(first->bias, 0, parts, n, r));
  second->weight.set_data(share_of(second->weight, 1, 1, n, r));
}

// The first Linear's input: its gradient summed over the ranks in backward (Megatron's f).
at::Tensor pair_input(const at::Tensor& x, TensorParallelGroup* tp) {
  return tp ? copy_to_tensor_parallel(x, *tp) : x;
}

// The second Linear on `h`: split, each rank's partial product summed over the ranks (g), then
// the bias once.
at::Tensor pair_output(nn::Linear& second, const at::Tensor& h, TensorParallelGroup* tp) {
  return tp ? reduce_from_tensor_parallel(F::linear(h, second->weight), *tp) + second->bias
            : second->forward(h);
}

// Which parameters the pairs split, by name ending: the dimension and blocks of their shares.
struct SplitParam {
  const char* suffix;
  int64_t dim, parts;
};
constexpr SplitParam kSplitParams[] = {
    {"attn.c_attn.weight", 0, 3}, {"attn.c_attn.bias", 0, 3}, {"attn.c_proj.weight", 1, 1},
    {"mlp.c_fc.weight", 0, 1},    {"mlp.c_fc.bias", 0, 1},    {"mlp.c_proj.weight", 1, 1}};

struct AttentionImpl : nn::Module {
  AttentionImpl(const GptConfig& c) : heads(c.heads), dropout(c.dropout) {
    c_attn = register_module("c_attn", nn::Linear(c.width, 3 * c.width));
    c_proj = register_module("c_proj", nn::Linear(c.width, c.width));
  }
  at::Tensor forward(const at::Tensor& x_in) {
    const at::Tensor x = pair_input(x_in, tp);
    const int64_t B = x.size(0), T = x.size(1);
    const int64_t n = tp ? tp->size() : 1, C = c_proj->weight.size(1), local = heads / n;
    const std::vector<at::Tensor> qkv = c_attn->forward(x).split(C, 2);
    auto heads_of = [&](const at::Tensor& t) { return t.view({B, T, local, C / local}).transpose(1, 2); };
    const at::Tensor y = at::scaled_dot_product_attention(
        heads_of(qkv[0]), heads_of(qkv[1]), heads_of(qkv[2]), {}, is_training() ? dropout : 0.0,
        /*is_causal=*/true);
    const at::Tensor out = pair_output(c_proj, y.transpose(1, 2).contiguous().view({B, T, C}), tp);
    return F::dropout(out, F::DropoutFuncOptions().p(dropout).training(is_training()));
  }
  // This rank's heads: their rows of the query, key and value projection, their columns of the
  // output projection.
  void split(TensorParallelGroup& group) {
    split_pair(c_attn, c_proj, 3, group);
    tp = &group;
  }
  int64_t heads;
  double dropout;
  TensorParallelGroup* tp = nullptr;
  nn::Linear c_attn{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(Attention);

struct MlpImpl : nn::Module {
  MlpImpl(const GptConfig& c) : dropout(c.dropout) {
    c_fc = register_module("c_fc", nn::Linear(c.width, 4 * c.width));
    c_proj = register_module("c_proj", nn::Linear(4 * c.width, c.width));
  }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor out = pair_output(c_proj, F::gelu(c_fc->forward(pair_input(x, tp))), tp);
    return F::dropout(out, F::DropoutFuncOptions().p(dropout).training(is_training()));
  }
  // This rank's hidden columns: its rows of c_fc, its columns of c_proj.
  void split(TensorParallelGroup& group) {
    split_pair(c_fc, c_proj, 1, group);
    tp = &group;
  }
  double dropout;
  TensorParallelGroup* tp = nullptr;
  nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(Mlp);

struct BlockImpl : nn::Module {
  BlockImpl(const GptConfig& c) {
    ln_1 = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({c.width})));
    attn = register_module("attn", Attention(c));
    ln_2 = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({c.width})));
    mlp = register_module("mlp", Mlp(c));
  }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = x + attn->forward(ln_1->forward(x));
    return h + mlp->forward(ln_2->forward(h));
  }
  nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

// The token and position embeddings of `tokens` [B, T], with dropout in training.
at::Tensor embed_tokens(nn::Embedding& wte, nn::Embedding& wpe, double dropout,
                        const at::Tensor& tokens) {
  const at::Tensor pos = torch::arange(tokens.size(1), tokens.options().dtype(at::kLong));
  return F::dropout(wte->forward(tokens) + wpe->forward(pos),
                    F::DropoutFuncOptions().p(dropout).training(wte->is_training()));
}

// The final LayerNorm, then the output layer, whose weight is the token embedding's.
at::Tensor output_logits(nn::LayerNorm& ln_f, nn::Embedding& wte, const at::Tensor& x) {
  return at::matmul(ln_f->forward(x), wte->weight.t());
}

// nanoGPT's layout: transformer.{wte, wpe, h.N, ln_f}; lm_head shares wte's weight.
struct GptNetImpl : nn::Module {
  explicit GptNetImpl(const GptConfig& c) : config(c) {
    wte = register_module("wte", nn::Embedding(c.vocab, c.width));
    wpe = register_module("wpe", nn::Embedding(c.context, c.width));
    h = register_module("h", nn::ModuleList());
    for (int64_t i = 0; i < c.layers; ++i) h->push_back(Block(c));
    ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({c.width})));
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      const std::string& name = p.key();
      if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
        p.value().zero_();
      } else if (name.find("ln_") != std::string::npos) {
        p.value().fill_(1.0);
      } else if (name.find("c_proj.weight") != std::string::npos) {
        p.value().normal_(0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers)));
      } else {
        p.value().normal_(0.0, 0.02);
      }
    }
  }
  at::Tensor embed(const at::Tensor& tokens) {
    return embed_tokens(wte, wpe, config.dropout, tokens);
  }
  at::Tensor head(const at::Tensor& x) { return output_logits(ln_f, wte, x); }
  GptConfig config;
  nn::Embedding wte{nullptr}, wpe{nullptr};
  nn::ModuleList h{nullptr};
  nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(GptNet);

const char* backend_name(int64_t choice) {
  switch (choice) {
    case 0: return "math";
    case 1: return "flash";
    case 2: return "efficient";
    case 3: return "cudnn";
    case 4: return "overrideable";
    default: return "none";
  }
}

class GptModel final : public Model {
 public:
  GptModel(std::string name, const GptConfig& c) : name_(std::move(name)), net_(c) {}
  std::string name() const override { return name_; }
  at::Tensor forward(const at::Tensor& tokens) override {
    SATURATE_CHECK(tokens.dim() == 2 && tokens.scalar_type() == at::kLong, "model: ", name_,
                   " takes int64 token windows [B, T], got ", tokens.scalar_type(), " ",
                   tokens.sizes());
    SATURATE_CHECK(tokens.size(1) <= net_->config.context, "model: ", name_, ": a window of ",
                   tokens.size(1), " tokens is above its context of ", net_->config.context);
    if (kernel_.empty() && net_->is_training()) {  // once: a tune builds a model per trial
      // Under autocast the attention inputs are in the autocast dtype.
      const c10::DeviceType type = tokens.device().type();
      const c10::ScalarType dtype = at::autocast::is_autocast_enabled(type)
                                        ? at::autocast::get_autocast_dtype(type)
                                        : net_->wte->weight.scalar_type();
      const std::string backend = sdpa_backend_for(net_->config, tokens.size(0), tokens.device(),
                                                   dtype, /*training=*/true);
      kernel_ = backend;
      static std::mutex mutex;
      static std::set<std::string> said;
      std::lock_guard<std::mutex> lock(mutex);
      if (said.insert(backend + tokens.device().str()).second)
        SATURATE_LOG_INFO("model: ", name_, " attention runs SDPA's ", backend, " kernel on ",
                          tokens.device().str());
    }
    at::Tensor x = net_->embed(tokens);
    const bool recompute_on = segments_ > 0 && net_->is_training() && at::GradMode::is_enabled();
    const auto layers = static_cast<int64_t>(net_->h->size());
    for (int64_t s = 0; s < (recompute_on ? segments_ : 1); ++s) {
      const int64_t first = recompute_on ? s * layers / segments_ : 0;
      const int64_t last = recompute_on ? (s + 1) * layers / segments_ : layers;
      auto run = [net = net_.ptr(), first, last](const at::Tensor& in) {
        at::Tensor h = in;
        for (int64_t i = first; i < last; ++i) h = net->h->ptr<BlockImpl>(i)->forward(h);
        return h;
      };
      x = recompute_on ? recompute(run, x) : run(x);
    }
    return net_->head(x);
  }
  std::vector<at::Tensor> parameters() override { return net_->parameters(); }
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& p : net_->named_parameters()) out.emplace_back(p.key(), p.value());
    return out;
  }
  std::vector<at::Tensor> state_tensors() override {
    std::vector<at::Tensor> out = net_->parameters();
    for (auto& b : net_->buffers()) out.push_back(b);
    return out;
  }
  void train(bool on) override { net_->train(on); }
  bool is_training() const override { return net_->is_training(); }
  void to(const c10::Device& device) override { net_->to(device); }
  // PaLM's count: 2 FLOPs per parameter and token in forward (6 in training), plus attention's
  // 4·L·H·Q·T per token (12 in training); position embeddings are looked up, not multiplied.
  int64_t forward_flops_per_sample() const override {
    const GptConfig& c = net_->config;
    int64_t n = 0;
    for (const auto& p : net_->parameters()) n += p.numel();
    n -= net_->wpe->weight.numel();
    const int64_t t = c.seq_len;
    return t * (2 * n + 4 * c.layers * c.width * t);
  }
  bool set_recompute_segments(int64_t segments) override {
    SATURATE_CHECK(segments >= 0, "model: recompute segments must be >= 0 (0 turns it off), got ",
                   segments);
    segments_ = std::min<int64_t>(segments, static_cast<int64_t>(net_->h->size()));
    return true;
  }
  int64_t recompute_segments() const override { return segments_; }
  std::string attention_kernel() const override { return kernel_; }
  bool set_tensor_parallel(TensorParallelGroup* group) override;
  std::string tensor_parallel_problem(int size) const override {
    const GptConfig& c = net_->config;
    if (size >= 1 && c.heads % size == 0 && c.width % size == 0) return "";
    return name_ + "'s " + std::to_string(c.heads) + " heads and width " +
           std::to_string(c.width) + " do not split evenly over it";
  }
  std::vector<std::pair<std::string, at::Tensor>> whole_named_parameters() override;
  TensorParallelGroup* tensor_parallel_group() override { return tp_; }
  std::vector<at::Tensor> tensor_parallel_shares() override;
  // The embeddings, each block, the head.
  int64_t pipeline_layers() const override { return net_->config.layers + 2; }
  std::unique_ptr<Model> pipeline_stage(int64_t begin, int64_t end) override;
  bool is_tensor_parallel_layer(int64_t layer) const override {
    return layer >= 1 && layer <= net_->config.layers;  // the blocks
  }

 private:
  TensorParallelGroup* tp_ = nullptr;
  std::string name_;
  GptNet net_;
  int64_t segments_ = 0;
  std::string kernel_;  // what SDPA chose at the first training forward
};

// Layers [begin, end) of the GPT's chain for a pipeline stage: layer 0 the embeddings, 1..L the
// blocks, L + 1 the head (the final LayerNorm and the output layer). It holds the whole model's
// modules of its layers only, under the whole model's names. The output layer's weight is the
// token embedding's: a stage with the head and not the embeddings holds its own copy of that
// weight, tied to the first stage's (pipeline_tied_parameters).
class GptStage final : public Model {
 public:
  GptStage(std::string name, GptNet& net, int64_t begin, int64_t end, TensorParallelGroup* tp)
      : name_(std::move(name)), config_(net->config), first_block_(std::max<int64_t>(begin, 1) - 1),
        tp_(tp) {
    const int64_t layers = net->config.layers;
    if (begin == 0) {
      wte_ = net->wte;
      wpe_ = net->wpe;
    }
    for (int64_t i = first_block_; i < std::min(end, layers + 1) - 1; ++i)
      blocks_.push_back(net->h->ptr<BlockImpl>(i));
    if (end == layers + 2) {
      wte_ = net->wte;
      ln_f_ = net->ln_f;
    }
    train(net->is_training());
  }
  std::string name() const override { return name_; }
  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor h = x;
    if (!wpe_.is_empty()) {
      SATURATE_CHECK(x.dim() == 2 && x.scalar_type() == at::kLong, "model: ", name_,
                     " takes int64 token windows [B, T], got ", x.scalar_type(), " ", x.sizes());
      SATURATE_CHECK(x.size(1) <= config_.context, "model: ", name_, ": a window of ", x.size(1),
                     " tokens is above its context of ", config_.context);
      h = embed_tokens(wte_, wpe_, config_.dropout, h);
    }
    for (const auto& b : blocks_) h = b->forward(h);
    return ln_f_.is_empty() ? h : output_logits(ln_f_, wte_, h);
  }
  std::vector<at::Tensor> parameters() override {
    std::vector<at::Tensor> out;
    for (auto& named : named_parameters()) out.push_back(named.second);
    return out;
  }
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    if (!wte_.is_empty()) out.emplace_back("wte.weight", wte_->weight);
    if (!wpe_.is_empty()) out.emplace_back("wpe.weight", wpe_->weight);
    for (size_t i = 0; i < blocks_.size(); ++i)
      for (const auto& p : blocks_[i]->named_parameters())
        out.emplace_back("h." + std::to_string(first_block_ + static_cast<int64_t>(i)) + "." +
                             p.key(),
                         p.value());
    if (!ln_f_.is_empty())
      for (const auto& p : ln_f_->named_parameters()) out.emplace_back("ln_f." + p.key(), p.value());
    return out;
  }
  std::vector<at::Tensor> state_tensors() override { return parameters(); }
  void train(bool on) override {
    for (nn::Module* m : modules()) m->train(on);
    training_ = on;
  }
  bool is_training() const override { return training_; }
  void to(const c10::Device& device) override {
    for (nn::Module* m : modules()) m->to(device);
  }
  // Split by tensor before the stages were cut: its blocks are this rank's shares.
  TensorParallelGroup* tensor_parallel_group() override { return blocks_.empty() ? nullptr : tp_; }
  std::vector<at::Tensor> tensor_parallel_shares() override;
  std::vector<std::pair<std::string, at::Tensor>> whole_named_parameters() override;
  std::vector<at::Tensor> pipeline_tied_parameters() override {
    // The head without the embeddings, or the embeddings without the head: the weight both use
    // lives on two stages.
    if (!wte_.is_empty() && wpe_.is_empty() != ln_f_.is_empty()) return {wte_->weight};
    return {};
  }

 private:
  std::vector<nn::Module*> modules() {
    std::vector<nn::Module*> out;
    if (!wte_.is_empty()) out.push_back(wte_.get());
    if (!wpe_.is_empty()) out.push_back(wpe_.get());
    for (auto& b : blocks_) out.push_back(b.get());
    if (!ln_f_.is_empty()) out.push_back(ln_f_.get());
    return out;
  }

  std::string name_;
  GptConfig config_;
  int64_t first_block_;
  nn::Embedding wte_{nullptr}, wpe_{nullptr};
  std::vector<std::shared_ptr<BlockImpl>> blocks_;
  nn::LayerNorm ln_f_{nullptr};
  TensorParallelGroup* tp_ = nullptr;
  bool training_ = true;
};

std::unique_ptr<Model> GptModel::pipeline_stage(int64_t begin, int64_t end) {
  const int64_t n = pipeline_layers();
  SATURATE_CHECK(0 <= begin && begin < end && end <= n, "model: ", name_, " has ", n,
                 " layers (the embeddings, ", net_->config.layers,
                 " blocks, the head); a pipeline stage of layers [", begin, ", ", end,
                 ") is not among them");
  return std::make_unique<GptStage>(
      name_ + "[" + std::to_string(begin) + ":" + std::to_string(end) + "]", net_, begin, end, tp_);
}

bool GptModel::set_tensor_parallel(TensorParallelGroup* group) {
  if (group == nullptr) return true;
  SATURATE_CHECK(tp_ == nullptr, "model: ", name_, " is already split over ranks");
  const int n = group->size();
  const std::string problem = tensor_parallel_problem(n);
  SATURATE_CHECK(problem.empty(), "--tensor-parallel ", n, ": ", problem);
  if (n == 1) return true;
  for (size_t i = 0; i < net_->h->size(); ++i) {
    const auto b = net_->h->ptr<BlockImpl>(i);
    b->attn->split(*group);
    b->mlp->split(*group);
  }
  tp_ = group;
  return true;
}

// How the parameter `name` is split over a tensor-parallel group; nullptr: it stays whole.
const SplitParam* split_param_of(const std::string& name) {
  for (const SplitParam& sp : kSplitParams) {
    const std::string tail = sp.suffix;
    if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
      return &sp;
  }
  return nullptr;
}

// Of `named` (a model's or a stage's parameters, under the whole model's names): the shares.
std::vector<at::Tensor> shares_among(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                     TensorParallelGroup* tp) {
  std::vector<at::Tensor> out;
  if (tp == nullptr) return out;
  for (const auto& [name, t] : named)
    if (split_param_of(name) != nullptr) out.push_back(t);
  return out;
}

// `named` with each share replaced by the whole tensor, gathered over `tp` (a collective).
std::vector<std::pair<std::string, at::Tensor>> gathered_whole(
    std::vector<std::pair<std::string, at::Tensor>> named, TensorParallelGroup* tp) {
  if (tp == nullptr) return named;
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : named)
    if (const SplitParam* sp = split_param_of(name)) t = whole_of(t.detach(), sp->dim, sp->parts, *tp);
  return named;
}

std::vector<at::Tensor> GptModel::tensor_parallel_shares() {
  return shares_among(named_parameters(), tp_);
}

std::vector<std::pair<std::string, at::Tensor>> GptModel::whole_named_parameters() {
  return gathered_whole(named_parameters(), tp_);
}

std::vector<at::Tensor> GptStage::tensor_parallel_shares() {
  return shares_among(named_parameters(), tensor_parallel_group());
}

std::vector<std::pair<std::string, at::Tensor>> GptStage::whole_named_parameters() {
  return gathered_whole(named_parameters(), tensor_parallel_group());
}

int64_t option_int(const std::string& key, const std::string& value, const std::string& spec) {
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  SATURATE_CHECK(!value.empty() && *end == '\0' && v >= 1 && v <= 1000000, "model: ", spec, ": ",
                 key, " must be a positive integer, got '", value, "'");
  return v;
}

}  // namespace

bool is_gpt_spec(const std::string& spec) {
  return spec == "gpt-mini" || spec == "gpt-small" || spec.rfind("gpt-mini:", 0) == 0 ||
         spec.rfind("gpt-small:", 0) == 0;
}

GptConfig parse_gpt_spec(const std::string& spec, const ModelInputs& inputs) {
  GptConfig c;
  const size_t colon = spec.find(':');
  const std::string base = spec.substr(0, colon);
  if (base == "gpt-small") {
    c.layers = 6, c.heads = 6, c.width = 384, c.context = 256;
  }
  std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    SATURATE_CHECK(eq != std::string::npos, "model: ", spec, ": options are KEY=VALUE, got '",
                   item, "'");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "layers") c.layers = option_int(key, value, spec);
    else if (key == "heads") c.heads = option_int(key, value, spec);
    else if (key == "width") c.width = option_int(key, value, spec);
    else if (key == "context") c.context = option_int(key, value, spec);
    else if (key == "dropout") {
      char* end = nullptr;
      c.dropout = std::strtod(value.c_str(), &end);
      SATURATE_CHECK(!value.empty() && *end == '\0' && c.dropout >= 0 && c.dropout < 1, "model: ",
                     spec, ": dropout must be in [0, 1), got '", value, "'");
    } else {
      SATURATE_CHECK(false, "model: ", spec, ": unknown option '", key,
                     "' (layers, heads, width, context, dropout)");
    }
  }
  SATURATE_CHECK(c.width % c.heads == 0, "model: ", spec, ": width ", c.width,
                 " is not a multiple of heads ", c.heads);
  SATURATE_CHECK(inputs.tokens && inputs.sample_shape.size() == 1, "model: ", base,
                 " is a language model: it needs text data (--data text:PATH)");
  c.vocab = inputs.num_classes;
  c.seq_len = inputs.sample_shape[0];
  SATURATE_CHECK(c.seq_len <= c.context, "--seq-len ", c.seq_len, " is above ", base,
                 "'s context of ", c.context, " tokens (raise it with ", base, ":context=N)");
  return c;
}

std::unique_ptr<Model> make_gpt(const std::string& spec, const ModelInputs& inputs) {
  const GptConfig c = parse_gpt_spec(spec, inputs);
  return std::make_unique<GptModel>(spec, c);
}

std::string sdpa_backend_for(const GptConfig& c, int64_t batch, const c10::Device& device,
                             c10::ScalarType dtype, bool training) {
  const at::Tensor q = torch::empty({batch, c.heads, c.seq_len, c.width / c.heads},
                                    torch::TensorOptions().device(device).dtype(dtype));
  return backend_name(
      at::_fused_sdp_choice(q, q, q, {}, training ? c.dropout : 0.0, /*is_causal=*/true));
}

}  // namespace saturate::detail
