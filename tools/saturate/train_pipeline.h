// SPDX-License-Identifier: Apache-2.0
#pragma once
// `train --pipeline-stages S --micro-batches M --pipeline-schedule gpipe|1f1b`: the model split
// by layers over S ranks (distributed/pipeline.h), each training its own stage.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/Device.h>

#include "saturate/distributed/process_group.h"
#include "saturate/models/model.h"
#include "saturate/models/tensor_parallel.h"
#include "saturate/train/gradient_sync.h"
#include "saturate/train/staged_step.h"

namespace CLI {
class App;
}

namespace saturate {
class DeviceMemory;
class DistGroup;
class Model;
class GradientSync;
class StagedStep;
struct ModelInputs;
struct Plan;
struct StageReport;
struct TrainReport;
struct TrainSummary;
struct TrainOptions;
class Trainer;
struct LoadedCheckpoint;
}  // namespace saturate

namespace saturate::cli {

struct PipelineFlags {
  int stages = 1;
  int64_t micro_batches = -1;  ///< -1: min(4 × stages, the batch)
  std::string schedule = "1f1b";
  std::string split = "balanced";  ///< balanced (profiled) | even (by layer count)
  int tensor_parallel = 1;         ///< --tensor-parallel T: the GPT's heads over T ranks
  bool on() const { return stages > 1; }
  /// The micro-batches a step of `batch` samples runs as: --micro-batches, else min(4 × stages,
  /// the batch).
  int64_t micro_batches_at(int64_t batch) const {
    return micro_batches > 0 ? micro_batches : std::min<int64_t>(4 * stages, batch);
  }
  /// Ranks that hold one replica of the model between them.
  int ranks_per_replica() const { return std::max(1, stages) * std::max(1, tensor_parallel); }
};

void add_pipeline_flags(CLI::App& app, PipelineFlags& flags);

/// The plan's pipeline layout (config.pipeline_*) for each pipeline flag not given on the
/// command line.
void apply_plan_pipeline(const Plan& plan, const CLI::App& app, PipelineFlags& flags);

struct RecipeFlags;
struct CheckpointFlags;
/// What a pipeline run cannot do yet, as the flag that asks for it (empty: nothing).
std::string pipeline_incompatible(const RecipeFlags& recipe, const CheckpointFlags& checkpoints,
                                  const PipelineFlags& flags);

/// The flags' values, before anything starts: saturate::Error (exit 2) for fewer than 1 stage,
/// --micro-batches below 1 or above the batch, an unknown schedule or split, and, with more than
/// one stage, what a pipeline run cannot do yet (`incompatible`, a flag's name; empty: nothing).
void check_pipeline_flags(const PipelineFlags& flags, const TrainOptions& options,
                          const std::string& incompatible);

/// Under a launcher: the world must be a multiple of the ranks per replica (stages × tensor
/// ranks; world / that many replicas, data parallel). saturate::Error naming them otherwise.
void check_pipeline_world(const PipelineFlags& flags, int world);

/// A world of replicas × n ranks, where rank r is part r % n of replica r / n (a pipeline stage,
/// a tensor share): the groups of this rank's replica and, with several replicas, of its part
/// on each of them. With a `stride` s, each part is s ranks and the groups are those of rank
/// r's place r % s within its part (the stages of one tensor share: rank r is share r % T of
/// stage r / T % S of replica r / (S × T)).
struct ReplicaGroups {
  std::unique_ptr<DistGroup> within;  ///< this replica's n ranks, in part order
  std::unique_ptr<DistGroup> across;  ///< this part on every replica; null with one replica
  int part = 0, replica = 0, replicas = 1;
  /// " of replica d of D", or "" with one replica: for logs.
  std::string where() const;
};
/// Forms them over `group` (a collective of every rank); `kind` names their store keys.
ReplicaGroups replica_groups(DistGroup& group, int n, const std::string& kind, int stride = 1,
                             bool with_across = true);

/// Tensor parallel (--tensor-parallel T): rank r holds tensor share r % T of replica r / T, with
/// data parallel over the replicas (each share's gradients averaged with the same share's).
/// With --pipeline-stages too, the T ranks of one stage share its layers (no replicas_sync:
/// the pipeline averages across replicas).
struct TensorParallelRun {
  ReplicaGroups groups;  ///< this replica's shares; this share's replicas
  std::unique_ptr<TensorParallelGroup> tp;
  std::unique_ptr<GradientSync> replicas_sync;  ///< null with one replica
  int64_t local_parameters = 0, whole_parameters = 0;
};
/// Splits `model` (saturate::Error when it cannot be split by tensor: only the GPT can).
TensorParallelRun build_tensor_parallel(const PipelineFlags& flags, Model& model, DistGroup& group);

/// This rank's stage of `model` and the step that runs it: rank r is stage r % S of replica
/// r / S (stage r / T % S with T tensor shares, each share's stages a pipeline), and with
/// several replicas each stage's gradients are averaged across them after every step. The
/// split is rank 0's (by its profile of each layer's forward and backward at the batch, for
/// "balanced"; a tensor-split layer's time and parameters divided by T), broadcast so every
/// rank builds the same one, and logged with each stage's predicted time and memory.
/// saturate::Error for a model that cannot be split, more stages than layers, or no split
/// within `memory_limit_bytes` (0: none).
struct PipelineRun {
  ReplicaGroups groups;  ///< this replica's stages; this stage's replicas
  std::unique_ptr<Model> stage;
  std::unique_ptr<StagedStep> step;
  int64_t micro_batches = 1;
  std::vector<std::pair<int64_t, int64_t>> spans;  ///< [begin, end) of every stage's layers
  std::vector<double> predicted_ms;  ///< rank 0's profile per stage (empty elsewhere, or even)
  int shares = 1;                    ///< tensor shares per stage
};

/// The model-parallel side of a train run: pipeline stages, tensor shares, or neither.
struct ModelParallelRun {
  PipelineRun pipe;
  TensorParallelRun tensor;
  Model* trained = nullptr;      ///< what this rank's Trainer trains: its stage, or the model
  GradientSync* sync = nullptr;  ///< the data-parallel sync over the replicas (may be null)
};
/// A split run's processes (`parts` a replica, over the job's `group`): they check that each
/// resumes from the same step (saturate::Error otherwise) and agree at step boundaries on
/// stopping, checkpoints and divergence (Trainer::set_boundary_vote). Nothing for a whole model.
void agree_split_run(Trainer& trainer, DistGroup* group, int parts,
                     const std::optional<LoadedCheckpoint>& resume);
/// The whole model's state (Model::named_state's names and shapes) on rank 0 of a split run, for
/// --save-model: replica 0's stages send theirs there; a tensor split's shares are gathered.
/// Empty elsewhere and for a whole model. A collective: every rank calls it.
std::vector<std::pair<std::string, at::Tensor>> gather_whole_state(const ModelParallelRun& run,
                                                                   Model& whole, DistGroup* group);
/// Builds it for `flags` (nothing for one rank per replica): `dp_sync` is the run's
/// data-parallel sync, used as it is when the model is whole on each rank; `cpu_memory` (the
/// run's, on a CPU) lets the balanced split measure each layer's activations.
ModelParallelRun build_model_parallel(const PipelineFlags& flags, Model& model,
                                      const ModelInputs& inputs, DistGroup* group,
                                      const c10::Device& device, const TrainOptions& options,
                                      int64_t memory_limit_bytes, GradientSync* dp_sync,
                                      DeviceMemory* cpu_memory = nullptr);
/// Checks the flags with the plan's settings in and the world, and turns off what a split model
/// cannot measure yet (the noise scale of a tensor-parallel model's shards).
void settle_model_parallel(const PipelineFlags& flags, RecipeFlags& recipe,
                           const CheckpointFlags& checkpoints, int world);
/// The report's model-parallel part (a collective for pipeline stages).
void describe_model_parallel(TrainReport& r, const ModelParallelRun& run,
                             const PipelineFlags& flags, DistGroup* group);

/// Every stage's layers and steady-state measurements (from `summary`, this rank's), gathered
/// from all ranks (a collective), with rank 0's predictions.
std::vector<StageReport> gather_stage_reports(const PipelineRun& run, DistGroup& group,
                                              const TrainSummary& summary);

}  // namespace saturate::cli
