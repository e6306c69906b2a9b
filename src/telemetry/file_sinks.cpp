// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/file_sinks.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "saturate/core/atomic_file.h"
#include "saturate/core/error.h"
#include "saturate/core/json.h"
#include "saturate/core/log.h"
#include "saturate/core/units.h"

namespace saturate {

JsonlSink::JsonlSink(const std::string& path, int64_t resume_step) : path_(path) {
  std::string kept;
  if (resume_step >= 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      // A line cut short by the crash that led to the resume does not parse: dropped. An
      // evaluation at the checkpoint's step ran before it was written, so it stays.
      if (!j.is_object()) continue;
      const int64_t step = j.value("step", int64_t{-1});
      if (step >= 0 && (step < resume_step || (step == resume_step && j.value("type", "") == "eval")))
        kept += line + "\n";
    }
  }
  file_ = std::fopen(path.c_str(), "w");
  SATURATE_CHECK(file_ != nullptr, "telemetry: cannot write '", path, "': ", std::strerror(errno));
  if (!kept.empty()) std::fwrite(kept.data(), 1, kept.size(), file_);
}

JsonlSink::~JsonlSink() {
  if (file_) std::fclose(file_);
}

std::string JsonlSink::step_line(const StepRecord& r) {
  nlohmann::json j;
  j["type"] = "step";
  j["step"] = r.step;
  j["epoch"] = r.epoch;
  j["samples"] = r.samples;
  if (r.tokens > 0) j["tokens"] = r.tokens;
  j["step_ms"] = r.step_ms;
  j["data_wait_ms"] = r.data_wait_ms;
  j["host_to_device_ms"] = r.host_to_device_ms;
  j["forward_ms"] = r.forward_ms;
  j["backward_ms"] = r.backward_ms;
  j["optimizer_ms"] = r.optimizer_ms;
  j["communication_ms"] = r.communication_ms;
  j["other_ms"] = r.other_ms;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["loss_scale"] = r.loss_scale;
  j["grad_norm"] = r.grad_norm >= 0 ? nlohmann::json(r.grad_norm) : nlohmann::json();
  j["skipped"] = r.is_skipped;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["page_faults"] = r.page_faults;
  if (r.gns_b_big > 0) {
    // The gradient noise scale: φ smoothed so far (null while |G|² is not above zero), and
    // this step's own estimates of |G|² and tr(Σ), from norms at b_small and b_big samples.
    auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
    j["gns"] = finite(r.gns);
    j["gns_grad_sqr"] = finite(r.noise_grad_sqr);
    j["gns_trace"] = finite(r.noise_trace);
    j["gns_b_small"] = r.gns_b_small;
    j["gns_b_big"] = r.gns_b_big;
    if (!std::isnan(r.gns_precond)) {
      j["gns_precond"] = finite(r.gns_precond);
      j["gns_grad_sqr_precond"] = finite(r.noise_grad_sqr_precond);
      j["gns_trace_precond"] = finite(r.noise_trace_precond);
    }
  }
  return j.dump();
}

void JsonlSink::on_step(const StepRecord& r) {
  const std::string line = step_line(r) + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
}

void JsonlSink::write_record(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

void JsonlSink::on_eval(int64_t step, const std::string& metric, double value) {
  const std::string line =
      nlohmann::json{{"type", "eval"}, {"step", step}, {"metric", metric}, {"value", value}}
          .dump() +
      "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

std::string JsonlSink::sample_line(int64_t step, const DeviceSample& s) {
  auto reported = [](double v) { return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuSample& g : s.gpus) {
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"util_pct", reported(g.util_pct)},
                    {"mem_used_bytes", reported(static_cast<double>(g.mem_used_bytes))},
                    {"mem_total_bytes", reported(static_cast<double>(g.mem_total_bytes))},
                    {"temperature_c", reported(g.temperature_c)},
                    {"power_w", reported(g.power_w)},
                    {"energy_j", reported(g.energy_j)},
                    {"sm_clock_mhz", reported(g.sm_clock_mhz)},
                    {"throttle_reasons", g.throttle_names}});
  }
  return nlohmann::json{{"type", "device_sample"},
                        {"step", step},
                        {"t_s", s.t_s},
                        {"cpu",
                         {{"util_pct", s.cpu.util_pct},
                          {"per_core_util_pct", s.cpu.per_core_util_pct},
                          {"process_rss_bytes", s.cpu.process_rss_bytes}}},
                        {"gpus", gpus}}
      .dump();
}

void JsonlSink::on_device_sample(int64_t step, const DeviceSample& s) {
  const std::string line = sample_line(step, s) + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
}

void JsonlSink::on_checkpoint(int64_t) { std::fflush(file_); }

void JsonlSink::on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                                const std::string& why) {
  const std::string line = nlohmann::json{{"type", "batch_change"},
                                          {"step", step},
                                          {"batch_size", batch},
                                          {"lr_multiplier", lr_multiplier},
                                          {"why", why}}
                               .dump() +
                           "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

void JsonlSink::on_end() { std::fflush(file_); }

namespace {

constexpr double kTraceFlushMs = 30000.0;
constexpr int64_t kMaxTraceBytes = int64_t{1} << 30;

// The events of the trace at `path` from steps before `resume_step` (metadata events are made
// anew); null when there is no usable trace there.
std::unique_ptr<nlohmann::json> earlier_events(const std::string& path, int64_t resume_step) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in || static_cast<int64_t>(in.tellg()) <= 0) return nullptr;
  if (static_cast<int64_t>(in.tellg()) > kMaxTraceBytes) {
    SATURATE_LOG_WARN("telemetry: --trace ", path, " is above 1 GiB; the resumed run starts it anew");
    return nullptr;
  }
  in.seekg(0);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    SATURATE_LOG_WARN("telemetry: --trace ", path, " is not a trace; the resumed run starts it anew");
    return nullptr;
  }
  auto kept = std::make_unique<nlohmann::json>(nlohmann::json::array());
  for (const auto& e : doc["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") == "M" || !e.contains("args")) continue;
    const nlohmann::json& a = e["args"];
    if (a.is_object() && a.contains("step") && a["step"].is_number_integer() &&
        a["step"].get<int64_t>() < resume_step)
      kept->push_back(e);
  }
  return kept;
}

}  // namespace

TraceSink::TraceSink(const std::string& path, int track, std::string track_name,
                     int64_t resume_step)
    : track_(track), track_name_(std::move(track_name)), path_(path) {
  if (path.empty()) return;
  if (resume_step >= 0) kept_ = earlier_events(path, resume_step);
  if (kept_) {
    for (const auto& e : *kept_)
      if (e.contains("ts") && e["ts"].is_number())
        offset_us_ = std::max(offset_us_, e["ts"].get<double>() + e.value("dur", 0.0));
    timeline_end_us_ = offset_us_;
  }
  // Write it now: an unwritable path should fail before the run, not after.
  std::FILE* f = std::fopen(path.c_str(), kept_ ? "a" : "w");
  SATURATE_CHECK(f != nullptr, "telemetry: cannot write --trace '", path, "': ",
                 std::strerror(errno));
  std::fclose(f);
  if (kept_) write_file();
}

TraceSink::~TraceSink() = default;

void TraceSink::write_file() const {
  // Atomically: a run killed while writing leaves the previous document whole. A failure
  // (reported at construction; a vanished folder now) loses only the trace.
  write_file_atomically(path_, json());
}

void TraceSink::on_step(const StepRecord& r) {
  // Records may arrive late (CUDA timing), so slices sit at the step's recorded start, never
  // before the previous step's end (device time can run past the host's next start).
  double t = std::max(offset_us_ + r.start_ms * 1000.0, timeline_end_us_);
  timeline_end_us_ = t + r.step_ms * 1000.0;
  slices_.push_back({"step " + std::to_string(r.step), t, r.step_ms * 1000.0, r.step});
  // Interleaved phases (micro-batches, a pipeline stage's schedule) as they ran.
  for (const PhaseSpan& sp : r.spans)
    if (sp.ms > 0) slices_.push_back({kPhaseNames[sp.phase], t + sp.start_ms * 1000.0, sp.ms * 1000.0, r.step});
  if (!r.spans.empty()) t += r.step_ms * 1000.0;
  const std::pair<const char*, double> phases[] = {
      {"data_wait", r.data_wait_ms},   {"host_to_device", r.host_to_device_ms},
      {"forward", r.forward_ms},       {"backward", r.backward_ms},
      {"optimizer", r.optimizer_ms},   {"communication", r.communication_ms},
      {"other", r.other_ms}};
  for (const auto& [name, ms] : phases) {
    if (ms <= 0 || !r.spans.empty()) continue;
    slices_.push_back({name, t, ms * 1000.0, r.step});
    t += ms * 1000.0;
  }
  if (!path_.empty() && r.start_ms - last_flush_ms_ >= kTraceFlushMs) {
    last_flush_ms_ = r.start_ms;
    write_file();
  }
}

void TraceSink::on_batch_change(int64_t step, int64_t batch, double lr_multiplier,
                                const std::string& why) {
  instants_.push_back({"batch → " + std::to_string(batch) + ", lr ×" +
                           format_fixed(lr_multiplier, 2),
                       why, timeline_end_us_, step});
}

std::string TraceSink::json() const {
  nlohmann::json events = nlohmann::json::array();
  const int pid = track_ + 1;
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 1},
                    {"args", {{"name", track_name_.empty() ? "saturate train" : track_name_}}}});
  events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 1},
                    {"args", {{"sort_index", track_}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 1},
                    {"args", {{"name", "training step"}}}});
  if (kept_)
    for (const auto& e : *kept_) events.push_back(e);
  for (const auto& s : slices_) {
    const bool is_step = s.name.rfind("step ", 0) == 0;
    events.push_back({{"name", s.name},
                      {"cat", is_step ? "step" : "phase"},
                      {"ph", "X"},
                      {"ts", s.ts_us},
                      {"dur", s.dur_us},
                      {"pid", pid},
                      {"tid", 1},
                      {"args", {{"step", s.step}}}});
  }
  for (const Instant& i : instants_)
    events.push_back({{"name", i.name},
                      {"cat", "batch_change"},
                      {"ph", "i"},
                      {"s", "p"},
                      {"ts", i.ts_us},
                      {"pid", pid},
                      {"tid", 1},
                      {"args", {{"step", i.step}, {"why", i.why}}}});
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

void TraceSink::on_end() {
  if (!path_.empty()) write_file();
}

std::string merge_traces(const std::vector<std::string>& documents) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t i = 0; i < documents.size(); ++i) {
    const nlohmann::json doc = nlohmann::json::parse(documents[i], nullptr, /*allow_exceptions=*/false);
    SATURATE_CHECK(doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array(),
                   "telemetry: trace ", i, " to merge is not a trace document");
    for (const auto& e : doc["traceEvents"]) events.push_back(e);
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

void write_trace(const std::string& path, const std::string& document) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  SATURATE_CHECK(f != nullptr, "telemetry: cannot write --trace '", path, "': ", std::strerror(errno));
  const bool ok = std::fwrite(document.data(), 1, document.size(), f) == document.size();
  SATURATE_CHECK(std::fclose(f) == 0 && ok, "telemetry: cannot write --trace '", path, "'");
}

}  // namespace saturate
