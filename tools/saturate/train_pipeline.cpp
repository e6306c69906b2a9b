// SPDX-License-Identifier: Apache-2.0
#include "train_pipeline.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "recipe.h"
#include "train_checkpoints.h"
#include "saturate/core/error.h"
#include "saturate/core/log.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/distributed/data_parallel.h"
#include "saturate/distributed/pipeline.h"
#include "saturate/distributed/process_group.h"
#include "saturate/distributed/tensor_parallel.h"
#include "saturate/models/model.h"
#include "saturate/report/train_report.h"
#include "saturate/train/precision.h"
#include "saturate/train/staged_step.h"
#include "saturate/train/train_options.h"
#include "saturate/train/trainer.h"
#include "saturate/tune/plan.h"

namespace saturate::cli {

void add_pipeline_flags(CLI::App& app, PipelineFlags& f) {
  app.add_option("--pipeline-stages", f.stages,
                 "split the model by layers over this many ranks (pipeline parallel; started "
                 "here as that many ranks unless a launcher started this one)")
      ->capture_default_str();
  app.add_option("--micro-batches", f.micro_batches,
                 "with --pipeline-stages: micro-batches per step (default: 4 × stages, at most "
                 "the batch)");
  app.add_option("--pipeline-schedule", f.schedule, "with --pipeline-stages: gpipe or 1f1b")
      ->capture_default_str();
  app.add_option("--tensor-parallel", f.tensor_parallel,
                 "split the GPT's attention heads and MLP columns over this many ranks (tensor "
                 "parallel; started here as that many ranks unless a launcher started this one)")
      ->capture_default_str();
  app.add_option("--pipeline-split", f.split,
                 "with --pipeline-stages: balanced (by each layer's measured time, within "
                 "--memory-limit), even (by layer count), or each stage's layer count (2,3,3)")
      ->capture_default_str();
}

std::string pipeline_incompatible(const RecipeFlags& rf, const CheckpointFlags& checkpoints,
                                  const PipelineFlags& f) {
  for_part(checkpoints, 0, f.ranks_per_replica());  // refuses one step's folder for a split
  // The trainer's own list; the precision is still the flag's text here (resolved later).
  TrainOptions o = rf.train;
  if (rf.precision == "fp16") o.precision = Precision::kFp16;
  const char* what = staged_step_conflict(o);
  return what != nullptr ? what : "";
}

void apply_plan_pipeline(const Plan& plan, const CLI::App& app, PipelineFlags& f) {
  const RunConfig& c = plan.config;
  if (app.count("--pipeline-stages") == 0) f.stages = c.pipeline_stages;
  if (app.count("--micro-batches") == 0 && c.pipeline_stages > 1 && c.micro_batches > 0)
    f.micro_batches = c.micro_batches;
  if (app.count("--pipeline-schedule") == 0) f.schedule = c.pipeline_schedule;
  if (app.count("--pipeline-split") == 0 && c.pipeline_stages > 1) f.split = c.pipeline_split;
  if (app.count("--tensor-parallel") == 0) f.tensor_parallel = c.tensor_parallel;
}

void check_pipeline_flags(const PipelineFlags& f, const TrainOptions& o,
                          const std::string& incompatible) {
  SATURATE_CHECK(f.stages >= 1, "--pipeline-stages must be at least 1, got ", f.stages);
  SATURATE_CHECK(f.micro_batches == -1 || f.micro_batches >= 1,
                 "--micro-batches must be at least 1, got ", f.micro_batches);
  SATURATE_CHECK(f.micro_batches <= o.batch_size || o.batch_size < 1, "--micro-batches ", f.micro_batches,
                 " is more than the batch of ", o.batch_size);
  parse_pipeline_schedule(f.schedule);
  parse_pipeline_split(f.split, f.stages, "--pipeline-split");
  SATURATE_CHECK(f.on() || f.micro_batches == -1, "--micro-batches needs --pipeline-stages above 1 "
                 "(micro-batches of one process's step are --accumulate)");
  SATURATE_CHECK(f.tensor_parallel >= 1, "--tensor-parallel must be at least 1, got ",
                 f.tensor_parallel);
  const char* flag = f.on() ? "--pipeline-stages" : "--tensor-parallel";
  if (f.ranks_per_replica() == 1) return;
  SATURATE_CHECK(incompatible.empty(), flag, ": cannot be combined with ", incompatible, " yet");
}

void check_pipeline_world(const PipelineFlags& f, int world) {
  const int n = f.ranks_per_replica();
  if (n == 1) return;
  const std::string both = "--pipeline-stages " + std::to_string(f.stages) + " × --tensor-parallel " +
                           std::to_string(f.tensor_parallel) + " = " + std::to_string(n) + " ranks a replica";
  SATURATE_CHECK(world % n == 0,
                 f.on() && f.tensor_parallel > 1 ? both
                 : f.on() ? "--pipeline-stages " + std::to_string(n)
                          : "--tensor-parallel " + std::to_string(n),
                 ": the world of ", world, " ranks is not a multiple of it");
}

std::string ReplicaGroups::where() const {
  return replicas > 1 ? " of replica " + std::to_string(replica) + " of " + std::to_string(replicas)
                      : std::string();
}

ReplicaGroups replica_groups(DistGroup& group, int n, const std::string& kind, int stride,
                             bool with_across) {
  ReplicaGroups g;
  const int block = n * stride, offset = group.rank() % stride;
  g.replicas = group.world_size() / block;
  g.part = group.rank() / stride % n;
  g.replica = group.rank() / block;
  std::vector<int> within, across;
  for (int p = 0; p < n; ++p) within.push_back(g.replica * block + p * stride + offset);
  for (int d = 0; d < g.replicas; ++d) across.push_back(d * block + g.part * stride + offset);
  const std::string at = stride > 1 ? "/at" + std::to_string(offset) : "";
  g.within = group.subgroup(within, kind + "/replica" + std::to_string(g.replica) + at);
  if (g.replicas > 1 && with_across)
    g.across = group.subgroup(across, kind + "/part" + std::to_string(g.part) + at);
  return g;
}

TensorParallelRun build_tensor_parallel(const PipelineFlags& f, Model& model, DistGroup& group) {
  // Before the shares' group forms: a rank that stopped during its rendezvous would fail the
  // others with a connection error instead of this.
  const std::string problem = model.tensor_parallel_problem(f.tensor_parallel);
  SATURATE_CHECK(problem.empty(), "--tensor-parallel ", f.tensor_parallel, ": ", problem);
  TensorParallelRun run;
  // Split into stages too: rank r is share r % T of its stage's group, and the stages average
  // across replicas themselves.
  run.groups = replica_groups(group, f.tensor_parallel, "tensor", 1, /*with_across=*/!f.on());
  if (run.groups.across) run.replicas_sync = make_data_parallel(*run.groups.across);
  for (const at::Tensor& p : model.parameters()) run.whole_parameters += p.numel();
  run.tp = make_tensor_parallel_group(*run.groups.within);
  SATURATE_CHECK(model.set_tensor_parallel(run.tp.get()), "--tensor-parallel: ", model.name(),
                 " cannot be split by tensor");
  for (const at::Tensor& p : model.parameters()) run.local_parameters += p.numel();
  SATURATE_LOG_INFO("train: tensor parallel, share ", run.groups.part, " of ", f.tensor_parallel,
                    f.on() ? std::string() : run.groups.where(), ": ", run.local_parameters, " of ",
                    run.whole_parameters, " parameters here", f.on() ? " before the stages are cut" : "");
  return run;
}

namespace {

// Rank 0's balanced split: each layer profiled forward and backward at the batch on the CPU
// copy of the model, with random inputs (tokens for a language model: the layers' cost does not
// depend on the values).
StageSplit profiled_split(const PipelineFlags& f, Model& model, const ModelInputs& inputs,
                          const TrainOptions& o, int64_t limit, DeviceMemory* cpu_memory) {
  std::vector<int64_t> shape = {o.batch_size};
  shape.insert(shape.end(), inputs.sample_shape.begin(), inputs.sample_shape.end());
  const at::Tensor x = inputs.tokens ? torch::randint(0, inputs.num_classes, shape, torch::kLong)
                                     : torch::randn(shape);
  std::vector<LayerCost> costs = profile_layers(model, x, 3, cpu_memory);
  // 1F1B holds at most S of the M micro-batches' activations at once (the first stage the
  // most), GPipe all of them: the profile's are the whole batch's.
  const int64_t m = f.micro_batches_at(o.batch_size);
  const double held = parse_pipeline_schedule(f.schedule) == PipelineSchedule::k1F1B
                          ? static_cast<double>(std::min<int64_t>(m, f.stages)) / static_cast<double>(m)
                          : 1.0;
  for (size_t i = 0; i < costs.size(); ++i) {
    costs[i].activation_bytes = static_cast<int64_t>(static_cast<double>(costs[i].activation_bytes) * held);
    // Split by tensor too: a split layer's work and parameters divide over its shares (the
    // profile ran on the whole model; the shares' all-reduces are not in it).
    if (f.tensor_parallel < 2 || !model.is_tensor_parallel_layer(static_cast<int64_t>(i))) continue;
    costs[i].ms /= f.tensor_parallel;
    costs[i].param_bytes /= f.tensor_parallel;
  }
  const double param_scale = o.optimizer == OptimizerKind::kSgd ? 3 : 4;
  const StageSplit split = split_layers_balanced(costs, f.stages, limit, param_scale);
  for (int s = 0; s < f.stages; ++s)
    SATURATE_LOG_INFO("train: pipeline stage ", s, ": layers ", split.spans[s].first, "-",
                      split.spans[s].second - 1, ", predicted ", format_fixed(split.ms[s], 1),
                      " ms forward and backward per batch, ", format_bytes(split.bytes[s]));
  return split;
}

// The cut points [b0, e0 = b1, ...] of rank 0's split, on every rank. When rank 0 finds no
// split within the memory limit, every rank stops with its reason (exit 2), not the others with
// a closed connection; a profile that itself runs out of memory falls back to the even split.
std::vector<std::pair<int64_t, int64_t>> agreed_split(const PipelineFlags& f, Model& model,
                                                      const ModelInputs& inputs, DistGroup& group,
                                                      const TrainOptions& o, int64_t limit,
                                                      DeviceMemory* cpu_memory,
                                                      std::vector<double>& predicted_ms) {
  const int64_t layers = model.pipeline_layers();
  SATURATE_CHECK(layers > 0, "--pipeline-stages: ", model.name(),
                 " cannot be split into stages by layers");
  std::vector<std::pair<int64_t, int64_t>> spans = split_layers_evenly(layers, f.stages);
  const std::vector<int64_t> counts = parse_pipeline_split(f.split, f.stages, "--pipeline-split");
  if (!counts.empty()) return spans_of_layer_counts(counts, layers);  // the same on every rank
  std::string failed;
  if (group.rank() == 0 && f.split == "balanced") {
    try {
      const StageSplit split = profiled_split(f, model, inputs, o, limit, cpu_memory);
      spans = split.spans;
      predicted_ms = split.ms;
    } catch (const c10::OutOfMemoryError& e) {
      for (const at::Tensor& p : model.parameters()) p.mutable_grad() = at::Tensor();
      SATURATE_LOG_WARN("train: --pipeline-split balanced: the whole model's layer profile ran out "
                        "of memory (", first_line(e.what()), "); splitting by layer count instead");
    } catch (const Error& e) {
      failed = e.what();
    }
  }
  at::Tensor cuts = torch::zeros({f.stages + 1}, torch::kLong);  // the last: rank 0 failed
  for (int s = 0; s < f.stages; ++s) cuts[s] = spans[s].second;
  cuts[f.stages] = failed.empty() ? 0 : 1;
  std::vector<at::Tensor> v = {cuts};
  group.broadcast(v, 0);
  if (v[0][f.stages].item<int64_t>() != 0) {
    const std::vector<std::string> why = group.allgather_bytes(failed);
    SATURATE_CHECK(false, why.front());
  }
  for (int s = 0; s < f.stages; ++s) {
    spans[s].first = s == 0 ? 0 : v[0][s - 1].item<int64_t>();
    spans[s].second = v[0][s].item<int64_t>();
  }
  return spans;
}

// This process keeps its stage's tensors only: every other tensor of the whole model becomes a
// zero-stride view of one element, keeping its name, shape and type (--save-model gathers the
// stages' tensors in their place). Returns the bytes let go.
int64_t release_other_layers(Model& whole, Model& stage) {
  const std::vector<at::Tensor> kept = stage.state_tensors();
  torch::NoGradGuard no_grad;
  int64_t freed = 0;
  for (auto& [name, t] : whole.named_state()) {
    if (std::any_of(kept.begin(), kept.end(), [&](const at::Tensor& k) { return k.is_same(t); }))
      continue;
    freed += static_cast<int64_t>(t.nbytes());
    t.set_data(torch::zeros({}, t.options()).expand(t.sizes()));
  }
  return freed;
}

// The pipeline of `run.spans` (agreed_split's) on this rank.
PipelineRun build_pipeline(const PipelineFlags& f, Model& model, DistGroup& group,
                           const c10::Device& device, const TrainOptions& o, PipelineRun run) {
  const auto& spans = run.spans;
  // Split by tensor too: each share's stages are a pipeline of their own.
  run.groups = replica_groups(group, f.stages, "pipeline", f.tensor_parallel, true);
  const int me = run.groups.part;
  run.stage = model.pipeline_stage(spans[me].first, spans[me].second);
  SATURATE_CHECK(run.stage != nullptr, "--pipeline-stages: ", model.name(),
                 " cannot be split into stages by layers");
  const int64_t freed = release_other_layers(model, *run.stage);
  run.micro_batches = f.micro_batches_at(o.batch_size);
  PipelineOptions po;
  po.micro_batches = run.micro_batches;
  po.schedule = parse_pipeline_schedule(f.schedule);
  run.step = make_pipeline_step(*run.groups.within, *run.stage, po, run.groups.across.get());
  const std::string share = f.tensor_parallel > 1 ? ", share " + std::to_string(group.rank() % f.tensor_parallel) : "";
  SATURATE_LOG_INFO("train: pipeline parallel, stage ", me, " of ", f.stages, share, run.groups.where(),
                    " (layers ",
                    spans[me].first, "-", spans[me].second - 1, ") on ", device.str(), "; ",
                    run.micro_batches, " micro-batches per step of ", o.batch_size, ", ",
                    f.schedule, ", bubble (S-1)/(M+S-1) = ",
                    format_fixed(100.0 * pipeline_bubble(f.stages, run.micro_batches), 0),
                    "%; the other stages' ", format_bytes(freed), " of weights let go here");
  return run;
}

}  // namespace

std::vector<StageReport> gather_stage_reports(const PipelineRun& run, DistGroup& group,
                                              const TrainSummary& summary) {
  const PhaseBreakdown& p = summary.phases;
  const std::vector<std::vector<double>> all = group.allgather(
      {p.forward_ms + p.backward_ms, p.communication_ms, p.step_ms,
       static_cast<double>(summary.peak_memory_bytes)});
  std::vector<StageReport> stages;
  // Replica 0's stages, in order: of share 0 where split by tensor too (rank s × T).
  const auto shares = static_cast<size_t>(run.shares);
  for (size_t s = 0; s < run.spans.size() && s * shares < all.size(); ++s) {
    const std::vector<double>& m = all[s * shares];
    StageReport st;
    st.first_layer = run.spans[s].first;
    st.last_layer = run.spans[s].second - 1;
    if (s < run.predicted_ms.size()) st.predicted_ms = run.predicted_ms[s];
    st.compute_ms = m[0];
    st.communication_ms = m[1];
    st.step_ms = m[2];
    st.peak_memory_bytes = static_cast<int64_t>(m[3]);
    stages.push_back(st);
  }
  return stages;
}

ModelParallelRun build_model_parallel(const PipelineFlags& f, Model& model,
                                      const ModelInputs& inputs, DistGroup* group,
                                      const c10::Device& device, const TrainOptions& o,
                                      int64_t memory_limit_bytes, GradientSync* dp_sync,
                                      DeviceMemory* cpu_memory) {
  ModelParallelRun run;
  run.trained = &model;
  run.sync = dp_sync;
  if (f.ranks_per_replica() == 1) return run;
  SATURATE_ASSERT(group != nullptr, "train: a split model without a process group");
  // The balanced split profiles the whole model, before any tensor split.
  PipelineRun pipe;
  if (f.on())
    pipe.spans = agreed_split(f, model, inputs, *group, o, memory_limit_bytes,
                              device.is_cpu() ? cpu_memory : nullptr, pipe.predicted_ms);
  if (f.tensor_parallel > 1) {
    run.tensor = build_tensor_parallel(f, model, *group);
    run.sync = run.tensor.replicas_sync.get();
  }
  if (f.on()) {
    pipe.shares = f.tensor_parallel;
    run.pipe = build_pipeline(f, model, *group, device, o, std::move(pipe));
    run.trained = run.pipe.stage.get();
    run.sync = nullptr;  // the stages average across replicas themselves
  }
  return run;
}

namespace {

// A stage's state as bytes: per tensor, its name's length, the name, its dimension count and
// sizes, its size in bytes, the bytes.
std::string pack_state(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::string out;
  auto put = [&](uint64_t n) { out.append(reinterpret_cast<const char*>(&n), sizeof n); };
  for (const auto& [name, t] : state) {
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    put(name.size());
    out += name;
    put(static_cast<uint64_t>(c.dim()));
    for (int64_t d : c.sizes()) put(static_cast<uint64_t>(d));
    put(c.nbytes());
    out.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return out;
}

// Puts each packed tensor in place of the one of its name in `state` (rank 0's model's, whose
// shares of a tensor split are smaller than the whole tensors packed), checking every length
// against what is left and each tensor's rank and size against that tensor's.
void unpack_state(const std::string& bytes, std::vector<std::pair<std::string, at::Tensor>>& state,
                  std::set<std::string>& filled) {
  size_t at = 0;
  auto get = [&] {
    uint64_t n = 0;
    SATURATE_ASSERT(bytes.size() - at >= sizeof n, "--save-model: a stage's state is truncated");
    std::memcpy(&n, bytes.data() + at, sizeof n);
    at += sizeof n;
    SATURATE_ASSERT(n <= bytes.size() - at, "--save-model: a stage's state is truncated");
    return n;
  };
  while (at < bytes.size()) {
    const uint64_t name_len = get();
    const std::string name = bytes.substr(at, name_len);
    at += name_len;
    auto it = std::find_if(state.begin(), state.end(), [&](const auto& e) { return e.first == name; });
    SATURATE_ASSERT(it != state.end(), "--save-model: stage tensor ", name, " is not the model's");
    const uint64_t dims = get();
    SATURATE_ASSERT(dims == static_cast<uint64_t>(it->second.dim()), "--save-model: stage tensor ",
                    name, " has ", dims, " dimensions, the model's ", it->second.dim());
    // Each size a multiple of the model's own (a share's whole tensor), and the bytes what they
    // ask for, checked before anything is allocated.
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (uint64_t d = 0; d < dims; ++d) {
      const uint64_t size = get(), own = static_cast<uint64_t>(it->second.size(static_cast<int64_t>(d)));
      SATURATE_ASSERT(size > 0 && own > 0 && size % own == 0 && numel <= bytes.size() / size,
                      "--save-model: stage tensor ", name, "'s size ", size, " in dimension ", d,
                      " does not fit the model's ", own);
      numel *= size;
      shape.push_back(static_cast<int64_t>(size));
    }
    const uint64_t n = get();
    SATURATE_ASSERT(n == numel * it->second.element_size(), "--save-model: stage tensor ", name,
                    " has ", n, " bytes for ", numel, " elements");
    at::Tensor t = torch::empty(shape, it->second.options().device(at::kCPU));
    std::memcpy(t.data_ptr(), bytes.data() + at, n);
    it->second = t;
    filled.insert(name);
    at += n;
  }
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> gather_whole_state(const ModelParallelRun& run,
                                                                   Model& whole, DistGroup* group) {
  std::vector<std::pair<std::string, at::Tensor>> state;
  if (group == nullptr || (run.pipe.stage == nullptr && run.tensor.tp == nullptr)) return state;
  torch::NoGradGuard no_grad;
  if (run.pipe.stage == nullptr) {
    std::vector<std::pair<std::string, at::Tensor>> params = whole.whole_named_parameters();
    if (group->rank() != 0) return state;
    state = whole.named_state();
    for (auto& [name, t] : state)
      for (const auto& [pname, p] : params)
        if (pname == name) t = p;
    return state;
  }
  // Split by tensor too: each stage's shares are gathered whole first (a collective of the
  // stage's shares), and share 0 sends them.
  Model& stage = *run.pipe.stage;
  const bool split = run.tensor.tp != nullptr;
  const auto mine = split ? stage.whole_named_parameters() : stage.named_state();
  const bool sends = run.pipe.groups.replica == 0 && (!split || run.tensor.groups.part == 0);
  const std::vector<std::string> all = group->allgather_bytes(sends ? pack_state(mine) : "");
  if (group->rank() != 0) return state;
  // Rank 0 holds its own stage only (release_other_layers): every tensor must come from a stage.
  state = whole.named_state();
  std::set<std::string> filled;
  for (const std::string& bytes : all) unpack_state(bytes, state, filled);
  for (const auto& [name, t] : state)
    SATURATE_ASSERT(filled.count(name) != 0, "--save-model: no stage sent tensor ", name);
  return state;
}

void agree_split_run(Trainer& trainer, DistGroup* group, int parts,
                     const std::optional<LoadedCheckpoint>& resume) {
  if (parts <= 1 || group == nullptr) return;
  // Every part must continue from the same step: a part whose newest checkpoint is older (its
  // newer one damaged) would train other steps than its neighbours.
  const double mine = resume ? static_cast<double>(resume->state.step) : -1.0;
  for (const std::vector<double>& other : group->allgather({mine}))
    SATURATE_CHECK(other[0] == mine, "train: --resume: this process's part ",
                   resume ? "resumes at step " + std::to_string(resume->state.step) : "has no checkpoint",
                   " but another part's ",
                   other[0] < 0 ? std::string("has none") : "resumes at step " + std::to_string(static_cast<int64_t>(other[0])),
                   ": the parts' checkpoint folders do not match");
  trainer.set_boundary_vote([group](std::vector<double>& votes) {
    std::vector<at::Tensor> t = {torch::tensor(votes, torch::kDouble)};
    group->allreduce_sum(t);
    for (size_t i = 0; i < votes.size(); ++i) votes[i] = t[0][static_cast<int64_t>(i)].item<double>();
  });
}

void settle_model_parallel(const PipelineFlags& f, RecipeFlags& rf, const CheckpointFlags& ck,
                           int world) {
  check_pipeline_flags(f, rf.train, pipeline_incompatible(rf, ck, f));
  check_pipeline_world(f, world);
  if (f.tensor_parallel > 1) rf.no_noise_scale = true;
}

void describe_model_parallel(TrainReport& r, const ModelParallelRun& run, const PipelineFlags& f,
                             DistGroup* group) {
  if (f.on() && group != nullptr) {
    r.stages = gather_stage_reports(run.pipe, *group, r.summary);
    r.micro_batches = run.pipe.micro_batches;
    r.pipeline_schedule = f.schedule;
  }
  if (f.tensor_parallel > 1) {
    r.tensor_parallel = f.tensor_parallel;
    r.local_parameters = run.tensor.local_parameters;
    r.whole_parameters = run.tensor.whole_parameters;
    if (run.pipe.stage != nullptr) {  // in stages too: this rank's stage's shares
      r.local_parameters = 0;
      for (const at::Tensor& p : run.pipe.stage->parameters()) r.local_parameters += p.numel();
    }
  }
}

}  // namespace saturate::cli
