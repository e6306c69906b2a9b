// SPDX-License-Identifier: Apache-2.0
#include "run_sinks.h"

#include <iostream>
#include <utility>

#include "saturate/report/train_report.h"
#include "saturate/telemetry/file_sinks.h"
#include "saturate/telemetry/tensorboard_writer.h"

namespace saturate::cli {

RunSinks::RunSinks(bool quiet, const std::string& logdir, const std::string& trace,
                   double sample_interval_ms, const DistEnv& dist, int64_t resume_step)
    : progress(std::cerr, stderr_is_tty()) {
  if (!quiet) all.add(&progress);
  files.emplace(logdir, trace, all, dist, resume_step);
  if (logdir.empty()) return;
  SamplerOptions options;
  options.interval_ms = sample_interval_ms;
  sampler.emplace(options);
  sampler->start();
  sampled.emplace(*sampler, all);
}

void RunSinks::describe_run(nlohmann::json context, const std::string& model,
                            const std::string& data, const TrainOptions& o) {
  if (!files || !files->jsonl) return;
  context["type"] = "context";
  context["model"] = model;
  context["data"] = data;
  context["batch_size"] = o.batch_size;
  context["accumulate"] = o.accumulate;
  context["precision"] = to_string(o.precision);
  context["optimizer"] = to_string(o.optimizer);
  context["lr"] = o.lr;
  files->jsonl->write_record(context);
}

void RunSinks::record_target(const TrainOptions& o, const TrainSummary& s) {
  if (o.target_metric.empty() || !files) return;
  if (files->jsonl) {
    nlohmann::json t = target_to_json(o, s);  // as the summary's "target"
    t["type"] = "target";
    files->jsonl->write_record(t);
  }
  if (files->tensorboard && s.target_reached) {
    files->tensorboard->on_eval(s.target_steps, "target_samples", static_cast<double>(s.target_samples));
    files->tensorboard->on_eval(s.target_steps, "target_train_s", s.target_train_s);
  }
}

void RunSinks::record_divergence(const TrainSummary& s) {
  if (!s.divergence || !files || !files->jsonl) return;
  nlohmann::json d = divergence_to_json(s.divergence);
  d["type"] = "divergence";
  files->jsonl->write_record(d);
}

void RunSinks::finish(DistGroup* group) {
  if (sampler) sampler->stop();
  files->finish(group);
}

}  // namespace saturate::cli
