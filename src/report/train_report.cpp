// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/train_report.h"

#include <cmath>
#include <functional>
#include <ostream>

#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/diagnose/diagnose.h"
#include "saturate/distributed/pipeline.h"
#include "saturate/report/context.h"

namespace saturate {
namespace {

using json = nlohmann::json;

json nan_to_null(double v) { return std::isnan(v) ? json() : json(v); }

json loader_json(const TrainReport& r) {
  return {{"workers", r.workers},
          {"prefetch", r.prefetch},
          {"samples", r.loader.samples},
          {"cache_hit_rate", r.loader.cache_hit_rate()},
          {"worker_busy_s", r.loader.worker_busy_s},
          {"wait_s", r.loader.wait_s}};
}

json phases_json(const PhaseBreakdown& p) {
  return {{"data_wait", p.data_wait_ms}, {"host_to_device", p.host_to_device_ms},
          {"forward", p.forward_ms},     {"backward", p.backward_ms},
          {"optimizer", p.optimizer_ms}, {"communication", p.communication_ms},
          {"other", p.other_ms},         {"step", p.step_ms}};
}

// The configuration the run trained with.
void add_options(const TrainReport& r, json& j) {
  const TrainOptions& o = r.options;
  j["batch_size"] = o.batch_size;
  j["global_batch_size"] = o.batch_size * r.world_size;
  j["optimizer"] = to_string(o.optimizer);
  j["lr"] = o.lr;
  j["clip_grad_norm"] = o.clip_grad_norm;
  j["schedule"] = to_string(o.schedule);
  j["seed"] = o.seed;
  j["precision"] = to_string(o.precision);
  j["accumulate"] = o.accumulate;
  j["recompute_segments"] = o.recompute_segments;
  j["memory_format"] = to_string(o.memory_format);
  j["eval_batch_size"] = o.eval_batch_size;
}

// What the run measured and how it ended.
void add_results(const TrainReport& r, json& j) {
  const TrainSummary& s = r.summary;
  // Ranks step together (each waits for the all-reduce), so the job makes world × rank 0's.
  j["job_samples_per_s"] = s.samples_per_s * r.world_size;
  j["peak_memory_bytes"] = s.peak_memory_bytes;
  j["skipped_steps"] = s.skipped_steps;
  j["loss_scale"] = s.loss_scale;
  j["steps"] = s.steps;
  j["samples"] = s.samples;
  j["epochs"] = s.epochs;
  j["samples_per_s"] = s.samples_per_s;
  if (r.tokens_per_sample > 0) {  // a language model: tokens/s, and perplexity = e^loss
    j["tokens_per_sample"] = r.tokens_per_sample;
    j["tokens_per_s"] = s.samples_per_s * static_cast<double>(r.tokens_per_sample);
    j["job_tokens_per_s"] = s.samples_per_s * static_cast<double>(r.tokens_per_sample) * r.world_size;
    j["val_perplexity"] = nan_to_null(std::exp(s.val_loss));
  }
  j["train_wall_s"] = s.train_wall_s;
  j["final_loss"] = s.final_loss;
  j["test_accuracy"] = nan_to_null(s.test_accuracy);
  j["test_loss"] = nan_to_null(s.test_loss);
  j["val_accuracy"] = nan_to_null(s.val_accuracy);
  j["val_loss"] = nan_to_null(s.val_loss);
  j["interrupted"] = s.is_interrupted;
  j["resumed_from_step"] = s.resumed_from_step;
  j["last_checkpoint"] = s.last_checkpoint;
  j["divergence"] = divergence_to_json(s.divergence);
  j["phases_ms"] = phases_json(s.phases);
  if (!r.options.target_metric.empty()) j["target"] = target_to_json(r.options, s);
  j["gns"] = noise_scale_to_json(s.noise);
  if (s.noise_precond.steps > 0) j["gns"]["preconditioned"] = noise_scale_to_json(s.noise_precond);
  if (s.noise.steps > 0) {
    j["gns"]["measured_steps"] = s.noise_measured_steps;
    j["gns"]["cost_share"] = s.noise_cost_share;
  }
  if (r.options.adaptive_batch) {
    json changes = json::array();
    for (const BatchChange& c : s.batch_changes)
      changes.push_back({{"step", c.step},
                         {"from", c.from},
                         {"to", c.to},
                         {"phi", c.phi},
                         {"gain", c.gain},
                         {"lr_multiplier", c.lr_multiplier},
                         {"predicted_speedup", c.predicted_speedup},
                         {"kind", c.kind},
                         {"why", c.why}});
    j["adaptive_batch"] = {{"changes", changes}};
  }
}

// The gradient noise scale, and how thinly the budget let the run measure it.
void noise_rows(const TrainReport& r,
                const std::function<void(const std::string&, const std::string&)>& row) {
  const TrainSummary& s = r.summary;
  if (s.noise.steps == 0) return;
  std::string cost;
  if (s.noise_measured_steps > 0 && s.noise_measured_steps < s.steps)
    cost = "; measured on " + std::to_string(s.noise_measured_steps) + " of " +
           count_of(s.steps, "step") + ", within " +
           format_fixed(100 * r.options.noise_scale_budget, 1) + "% of the step time";
  row("noise scale", describe_noise_scale(s.noise) + cost);
  if (s.noise_precond.steps > 0)
    row("noise (Adam)", describe_noise_scale(s.noise_precond) + ", preconditioned as AdamW steps");
}

// Validation and test results; a language model's loss is per token, with its perplexity.
void evaluation_rows(const TrainReport& r,
                     const std::function<void(const std::string&, const std::string&)>& row) {
  const TrainSummary& s = r.summary;
  if (!std::isnan(s.val_accuracy) && r.tokens_per_sample > 0) {
    row("val loss", format_fixed(s.val_loss, 4) + " per token, perplexity " +
                        format_fixed(std::exp(s.val_loss), 2));
    row("val accuracy", format_fixed(100.0 * s.val_accuracy, 2) + " % of next tokens");
  } else if (!std::isnan(s.val_accuracy)) {
    row("val accuracy", format_fixed(100.0 * s.val_accuracy, 2) + " %");
    row("val loss", format_fixed(s.val_loss, 4));
  }
  if (!std::isnan(s.test_accuracy)) {
    row("test accuracy", format_fixed(100.0 * s.test_accuracy, 2) + " %");
    row("test loss", format_fixed(s.test_loss, 4));
  }
}

}  // namespace

std::string describe_noise_scale(const NoiseScaleEstimate& e) {
  if (e.steps == 0) return "not measured";
  auto value = [](double v) { return std::isfinite(v) ? format_fixed(v, v < 10 ? 1 : 0) : "∞"; };
  std::string out = std::isfinite(e.phi) ? value(e.phi) : "not resolved (|G|² not above zero)";
  if (std::isfinite(e.phi) || std::isfinite(e.low))
    out += " (95%: " + value(e.low) + "–" + value(e.high) + ")";
  return out + ", " + std::to_string(e.steps) + " steps of " + format_fixed(e.b_small, 0) +
         " vs " + format_fixed(e.b_big, 0) + " samples";
}

json divergence_to_json(const std::optional<Divergence>& d) {
  if (!d) return nullptr;
  json norms = json::array();
  for (double g : d->grad_norms) norms.push_back(std::isfinite(g) ? json(g) : nullptr);
  return {{"step", d->step},
          {"reason", d->reason},
          {"last_finite_step", d->last_finite_step},
          {"last_finite_loss",
           std::isfinite(d->last_finite_loss) ? json(d->last_finite_loss) : nullptr},
          {"loss_scale", d->loss_scale},
          {"lr", d->lr},
          {"grad_norms", norms}};
}

json target_to_json(const TrainOptions& o, const TrainSummary& s) {
  return {{"metric", o.target_metric},
          {"value", o.target_value},
          {"reached", s.target_reached},
          {"steps", s.target_reached ? json(s.target_steps) : json(nullptr)},
          {"samples", s.target_reached ? json(s.target_samples) : json(nullptr)},
          {"train_s", s.target_reached ? json(s.target_train_s) : json(nullptr)},
          {"seen", nan_to_null(s.target_seen)}};
}

namespace {

// What the stages' measurements say (an uneven split).
std::vector<Finding> stage_findings(const TrainReport& r) {
  RunFacts facts;
  for (const StageReport& st : r.stages) facts.stage_compute_ms.push_back(st.compute_ms);
  return diagnose_stages(facts);
}

// Pipeline parallel: the layout and each stage's measurements; null without a pipeline.
json pipeline_json(const TrainReport& r) {
  if (r.stages.empty()) return nullptr;
  json stages = json::array();
  for (const StageReport& st : r.stages)
    stages.push_back({{"first_layer", st.first_layer},
                      {"last_layer", st.last_layer},
                      {"predicted_ms", nan_to_null(st.predicted_ms)},
                      {"compute_ms", st.compute_ms},
                      {"communication_ms", st.communication_ms},
                      {"step_ms", st.step_ms},
                      {"peak_memory_bytes", st.peak_memory_bytes}});
  return {{"stages", r.stages.size()},
          {"micro_batches", r.micro_batches},
          {"schedule", r.pipeline_schedule},
          {"bubble_formula", pipeline_bubble(static_cast<int64_t>(r.stages.size()), r.micro_batches)},
          {"per_stage", stages},
          {"findings", findings_to_json(stage_findings(r))}};
}

}  // namespace

json train_report_to_json(const TrainReport& r) {
  json j;
  j["schema_version"] = 1;
  j["model"] = r.model;
  j["data"] = r.data;
  j["loader"] = loader_json(r);
  j["device"] = r.device;
  j["threads"] = r.threads;
  j["world_size"] = r.world_size;
  j["pipeline"] = pipeline_json(r);
  j["tensor_parallel"] = r.tensor_parallel;
  j["memory_limit_bytes"] = r.memory_limit_bytes;
  j["val_samples"] = r.val_samples;
  j["terminated"] = r.is_terminated;
  add_options(r, j);
  add_results(r, j);
  j["context"] = run_context(r.probe, r.device);
  return j;
}

namespace {

// Tensor parallel: the split. Pipeline parallel: the layout, then one row per stage (its layers, compute against the
// split's prediction, the time it spent sending and waiting, and its peak memory).
template <typename Row>
void write_model_parallel_rows(const TrainReport& r, const Row& row) {
  if (r.tensor_parallel > 1)
    row("tensor parallel", std::to_string(r.tensor_parallel) +
                               " ranks split each block's attention heads and MLP columns; rank 0 "
                               "holds " + std::to_string(r.local_parameters) + " of " +
                               std::to_string(r.whole_parameters) + " parameters");
  if (r.stages.empty()) return;
  const auto n = static_cast<int64_t>(r.stages.size());
  row("pipeline", std::to_string(n) + " stages, " + std::to_string(r.micro_batches) +
                      " micro-batches per step, " + r.pipeline_schedule + "; bubble (S-1)/(M+S-1) " +
                      format_fixed(100.0 * pipeline_bubble(n, r.micro_batches), 0) +
                      "%");
  for (int64_t i = 0; i < n; ++i) {
    const StageReport& st = r.stages[i];
    std::string v = "layers " + std::to_string(st.first_layer) + "-" +
                    std::to_string(st.last_layer) + ": compute " + format_fixed(st.compute_ms, 2) +
                    " ms";
    if (std::isfinite(st.predicted_ms)) v += " (predicted " + format_fixed(st.predicted_ms, 2) + ")";
    v += ", communication " + format_fixed(st.communication_ms, 2) + " ms (" +
         format_fixed(st.step_ms > 0 ? 100 * st.communication_ms / st.step_ms : 0, 0) +
         "% of its step)";
    if (st.peak_memory_bytes > 0) v += ", peak " + format_bytes(st.peak_memory_bytes);
    row("stage " + std::to_string(i), v);
  }
  for (const Finding& f : stage_findings(r))
    row("finding", "[" + to_string(f.severity) + "] " + f.title + " → " + f.recommendation);
}

}  // namespace

void write_train_table(std::ostream& out, const TrainReport& r) {
  const TrainSummary& s = r.summary;
  const TrainOptions& o = r.options;
  const int world = r.world_size;
  auto row = [&](const std::string& k, const std::string& v) {
    std::string key = k;
    key.resize(16, ' ');
    out << "  " << key << v << "\n";
  };
  out << "saturate train: " << r.model << " on " << r.data << ", " << r.device << ", "
      << count_of(r.threads, "thread") << (s.is_interrupted ? " (interrupted)" : "") << "\n";
  // A pipeline's data-parallel unit is a replica of all its stages, not a rank.
  const std::string unit = r.stages.empty() && r.tensor_parallel == 1 ? "rank" : "replica";
  row("steps", std::to_string(s.steps) + " (" + format_fixed(s.epochs, 2) + " epochs, batch " +
                   std::to_string(o.batch_size) +
                   (world > 1 ? " per " + unit + " × " + std::to_string(world) + " " + unit +
                                    "s = " + std::to_string(o.batch_size * world)
                              : std::string()) +
                   ")");
  row("samples/s", world > 1 ? format_fixed(s.samples_per_s * world, 1) + " (steady state, " +
                                   std::to_string(world) + " " + unit + "s in step: " +
                                   format_fixed(s.samples_per_s, 1) + " on " + unit + " 0)"
                             : format_fixed(s.samples_per_s, 1) + " (steady state)");
  if (r.tokens_per_sample > 0)
    row("tokens/s", format_fixed(s.samples_per_s * static_cast<double>(r.tokens_per_sample) * world, 0) +
                        " (" + std::to_string(r.tokens_per_sample) + " tokens per sample)");
  row("step time", format_fixed(s.phases.step_ms, 2) + " ms: data " +
                       format_fixed(s.phases.data_wait_ms, 2) + ", forward " +
                       format_fixed(s.phases.forward_ms, 2) + ", backward " +
                       format_fixed(s.phases.backward_ms, 2) + ", optimizer " +
                       format_fixed(s.phases.optimizer_ms, 2) +
                       (world > 1 || !r.stages.empty() || r.tensor_parallel > 1
                            ? ", communication " + format_fixed(s.phases.communication_ms, 2)
                            : std::string()));
  write_model_parallel_rows(r, row);
  row("precision", to_string(o.precision) +
                       (o.memory_format != MemoryFormat::kContiguous
                            ? ", " + to_string(o.memory_format)
                            : std::string()) +
                       (o.accumulate > 1
                            ? ", " + std::to_string(o.accumulate) + " micro-batches per step"
                            : std::string()));
  if (s.peak_memory_bytes > 0) row("peak memory", format_bytes(s.peak_memory_bytes));
  if (o.precision == Precision::kFp16)
    row("loss scale", format_fixed(s.loss_scale, 0) + " (" + std::to_string(s.skipped_steps) +
                          " steps skipped for non-finite gradients)");
  row("train time", format_duration_s(s.train_wall_s));
  if (s.resumed_from_step >= 0) row("resumed", "from step " + std::to_string(s.resumed_from_step));
  if (!s.last_checkpoint.empty()) row("checkpoint", s.last_checkpoint);
  row("final loss", format_fixed(s.final_loss, 4) + " (mean of the last " +
                        (s.final_loss_steps == 1 ? std::string("step")
                                                 : count_of(s.final_loss_steps, "step")) +
                        ")");
  evaluation_rows(r, row);
  noise_rows(r, row);
  if (o.adaptive_batch) {
    std::string changes;
    for (const BatchChange& c : s.batch_changes)
      changes += (changes.empty() ? "" : ", ") + std::to_string(c.to) + " at step " +
                 std::to_string(c.step) + " (" + (c.kind == "try" ? "tried, " : c.kind == "undo" ? "undone, " : "") +
                 "lr ×" + format_fixed(c.lr_multiplier, 2) + ")";
    row("adaptive batch", changes.empty() ? "stayed at " + std::to_string(o.batch_size) +
                                                " (no doubling was predicted to pay)"
                                          : std::to_string(o.batch_size) + " → " + changes);
  }
  if (!o.target_metric.empty()) {
    const std::string goal = o.target_metric + (o.target_metric == "val_accuracy" ? " ≥ " : " ≤ ") +
                             format_fixed(o.target_value, 4);
    row("target", s.target_reached
                      ? goal + " reached at step " + std::to_string(s.target_steps) + " (" +
                            std::to_string(s.target_samples) + " samples, " +
                            format_fixed(s.target_train_s, 2) + " s of training; " +
                            format_fixed(s.target_seen, 4) + " seen)"
                      : goal + " not reached in " + std::to_string(s.steps) + " steps");
  }
}

}  // namespace saturate
