// SPDX-License-Identifier: Apache-2.0
#include "saturate/tune/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "saturate/core/error.h"
#include "saturate/core/json.h"
#include "saturate/core/strings.h"
#include "saturate/distributed/pipeline.h"
#include "saturate/telemetry/noise_scale_json.h"
#include "saturate/tune/exec_command.h"

namespace saturate {

const std::vector<std::string>& quality_status_names() {
  static const std::vector<std::string> names = {"not_run", "accepted", "rejected", "unaffordable",
                                                 "inconclusive"};
  return names;
}

std::string to_string(QualityStatus s) { return quality_status_names()[static_cast<size_t>(s)]; }

namespace {

using nlohmann::json;

const std::vector<std::string> kPrecisionNames = {"fp32", "tf32", "bf16", "fp16"};
const std::vector<std::string> kConfigKeys = {
    "batch_size", "precision",    "accumulate", "recompute_segments",
    "lr",         "warmup_steps", "optimizer",  "schedule",
    "threads",    "workers",      "prefetch",   "seed",
    "momentum",   "weight_decay", "eval_batch_size", "eval_every", "memory_format", "world_size", "clip_grad_norm",
    "pipeline_stages", "micro_batches", "pipeline_schedule", "pipeline_split", "tensor_parallel"};
const std::vector<std::string> kTopLevelKeys = {"schema_version",
                                                "model",
                                                "data",
                                                "device",
                                                "config",
                                                "effective_batch",
                                                "memory_limit_bytes",
                                                "reserve",
                                                "baseline",
                                                "tuned",
                                                "stages",
                                                "trials",
                                                "quality",
                                                "exec",
                                                "goodput",
                                                "probe_steps",
                                                "tune_wall_s",
                                                "budget_s",
                                                "interrupted",
                                                "denormals",
                                                "input",
                                                "evaluation",
                                                // diagnose() findings, added by saturate tune;
                                                // reports read them, training does not
                                                "findings",
                                                "context"};

bool is_positive(double v) { return v > 0; }
bool is_non_negative(double v) { return v >= 0; }
bool is_fraction(double v) { return v >= 0 && v < 1; }

// Reads the fields of one JSON object of a plan. Every error is one line naming the source and
// the field's full path: "plan.json: config.batch_size must be a positive integer, got -3".
// Absent and null fields give the fallback, so hand-written plans can be small.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string source, std::string path)
      : obj_(obj), source_(std::move(source)), path_(std::move(path)) {}

  const json* find(const std::string& key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }

  int64_t integer(const std::string& key, int64_t fallback, int64_t min,
                  const char* expected) const {
    const json* v = find(key);
    if (!v) return fallback;
    const bool fits = v->is_number_integer() &&
                      !(v->is_number_unsigned() &&
                        v->get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()});
    if (!fits || v->get<int64_t>() < min) fail(key, expected, *v);
    return v->get<int64_t>();
  }

  uint64_t unsigned_integer(const std::string& key, uint64_t fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0))
      fail(key, "a non-negative integer", *v);
    return v->get<uint64_t>();
  }

  double number(const std::string& key, double fallback, bool (*ok)(double) = nullptr,
                const char* expected = "a number") const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>()) || (ok && !ok(v->get<double>())))
      fail(key, expected, *v);
    return v->get<double>();
  }

  std::string string(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "a string", *v);
    return v->get<std::string>();
  }

  /// A string that must be one of `names`, with a "did you mean" for near misses.
  std::string name(const std::string& key, const std::string& fallback,
                   const std::vector<std::string>& names) const {
    const std::string s = string(key, fallback);
    for (const auto& n : names)
      if (s == n) return s;
    auto near = closest_match(s, names);
    SATURATE_CHECK(false, source_, ": ", field(key), " must be one of ", join(names, ", "),
                   ", got \"", s, "\"", near ? "; did you mean '" + *near + "'?" : "");
    return fallback;
  }

  bool boolean(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "true or false", *v);
    return v->get<bool>();
  }

  /// The object at `key`; an empty one when absent, so its fields take their defaults.
  FieldReader object(const std::string& key) const {
    static const json kEmpty = json::object();
    const json* v = find(key);
    if (!v) return FieldReader(kEmpty, source_, field(key));
    if (!v->is_object()) fail(key, "an object", *v);
    return FieldReader(*v, source_, field(key));
  }

  /// The array of strings at `key` (empty when absent).
  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> out;
    const json* v = find(key);
    if (!v) return out;
    if (!v->is_array()) fail(key, "an array of strings", *v);
    for (const json& x : *v) {
      if (!x.is_string()) fail(key, "an array of strings", *v);
      out.push_back(x.get<std::string>());
    }
    return out;
  }

  /// The object of strings at `key` (empty when absent).
  std::map<std::string, std::string> string_map(const std::string& key) const {
    std::map<std::string, std::string> out;
    const json* v = find(key);
    if (!v) return out;
    if (!v->is_object()) fail(key, "an object of strings", *v);
    for (const auto& [k, x] : v->items()) {
      if (!x.is_string()) fail(key + "." + k, "a string", x);
      out[k] = x.get<std::string>();
    }
    return out;
  }

  /// The array of numbers at `key` (empty when absent).
  std::vector<double> numbers(const std::string& key) const {
    std::vector<double> out;
    const json* v = find(key);
    if (!v) return out;
    if (!v->is_array()) fail(key, "an array of numbers", *v);
    for (const json& x : *v) {
      if (!x.is_number()) fail(key, "an array of numbers", *v);
      out.push_back(x.get<double>());
    }
    return out;
  }

  /// Calls `read(element_reader)` for each object in the array at `key` (none when absent).
  template <typename Fn>
  void each(const std::string& key, Fn&& read) const {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_array()) fail(key, "an array", *v);
    for (size_t i = 0; i < v->size(); ++i) {
      const std::string element = key + "[" + std::to_string(i) + "]";
      if (!(*v)[i].is_object()) fail(element, "an object", (*v)[i]);
      read(FieldReader((*v)[i], source_, field(element)));
    }
  }

  /// Rejects keys outside `known`: a typo in a hand-written plan must not pass silently.
  void check_keys(const std::vector<std::string>& known) const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      bool is_known = false;
      for (const auto& k : known) is_known = is_known || it.key() == k;
      SATURATE_CHECK(is_known || it.key() != "checkpoint_segments", source_, ": ",
                     field(it.key()), " is now ", field("recompute_segments"),
                     " (activation recomputation); rename it in the plan");
      SATURATE_CHECK(is_known, source_, ": ", field(it.key()), " is not a plan field",
                     did_you_mean(it.key(), known));
    }
  }

  /// Throws "<source>: <parts...>" when `cond` is false.
  template <typename... Parts>
  void check(bool cond, Parts&&... parts) const {
    SATURATE_CHECK(cond, source_, ": ", std::forward<Parts>(parts)...);
  }

  [[noreturn]] void fail(const std::string& key, const std::string& expected,
                         const json& got) const {
    detail::throw_error(
        detail::concat(source_, ": ", field(key), " must be ", expected, ", got ", got.dump()));
  }

  std::string field(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

 private:
  const json& obj_;
  std::string source_;
  std::string path_;
};

// ---- config -------------------------------------------------------------------------------------

json config_to_json(const RunConfig& c) {
  const TrainOptions& t = c.train;
  SATURATE_ASSERT(t.precision != Precision::kAuto, "a plan's precision is resolved");
  return {{"batch_size", t.batch_size},
          {"precision", to_string(t.precision)},
          {"accumulate", t.accumulate},
          {"recompute_segments", t.recompute_segments},
          {"lr", t.lr > 0 ? json(t.lr) : json(nullptr)},  // null: the program's own (--exec)
          {"warmup_steps", t.warmup_steps},
          {"optimizer", to_string(t.optimizer)},
          {"schedule", to_string(t.schedule)},
          {"threads", c.threads},
          {"workers", c.workers},
          {"prefetch", c.prefetch},
          {"seed", t.seed},
          {"momentum", t.momentum},
          {"weight_decay", t.weight_decay},
          {"clip_grad_norm", t.clip_grad_norm},
          {"eval_batch_size", t.eval_batch_size},
          {"eval_every", t.eval_every},
          {"memory_format", to_string(t.memory_format)},
          {"world_size", c.world_size},
          {"pipeline_stages", c.pipeline_stages},
          {"micro_batches", c.micro_batches},
          {"pipeline_schedule", c.pipeline_schedule},
          {"pipeline_split", c.pipeline_split},
          {"tensor_parallel", c.tensor_parallel}};
}

// Fields the reader leaves out keep TrainOptions' defaults.
RunConfig config_from_json(const FieldReader& r) {
  r.check_keys(kConfigKeys);
  RunConfig c;
  TrainOptions& t = c.train;
  t.batch_size = r.integer("batch_size", t.batch_size, 1, "a positive integer");
  t.precision = parse_precision(r.name("precision", to_string(t.precision), kPrecisionNames));
  t.accumulate = r.integer("accumulate", t.accumulate, 1, "an integer >= 1");
  r.check(t.accumulate <= t.batch_size, r.field("accumulate"), " (", t.accumulate,
          ") must not exceed ", r.field("batch_size"), " (", t.batch_size,
          "); each micro-batch needs at least one sample");
  t.recompute_segments =
      r.integer("recompute_segments", t.recompute_segments, 0, "a non-negative integer");
  t.lr = r.number("lr", t.lr, is_positive, "a positive number");
  t.warmup_steps = r.integer("warmup_steps", t.warmup_steps, -1, "an integer >= -1 (-1: auto)");
  t.optimizer = parse_optimizer(r.name("optimizer", to_string(t.optimizer), {"sgd", "adamw"}));
  t.schedule = parse_schedule(r.name("schedule", to_string(t.schedule), {"constant", "cosine"}));
  const int64_t threads = r.integer("threads", c.threads, 0, "a non-negative integer");
  r.check(threads <= std::numeric_limits<int>::max(), r.field("threads"), " is too large, got ",
          threads);
  c.threads = static_cast<int>(threads);
  c.workers = static_cast<int>(r.integer("workers", c.workers, 0, "an integer in [0, 256]"));
  r.check(c.workers <= 256, r.field("workers"), " must be at most 256, got ", c.workers);
  c.prefetch = static_cast<int>(r.integer("prefetch", c.prefetch, 1, "an integer in [1, 64]"));
  c.world_size =
      static_cast<int>(r.integer("world_size", c.world_size, 1, "an integer in [1, 65536]"));
  r.check(c.world_size <= 65536, r.field("world_size"), " must be at most 65536, got ",
          c.world_size);
  r.check(c.prefetch <= 64, r.field("prefetch"), " must be at most 64, got ", c.prefetch);
  c.pipeline_stages = static_cast<int>(
      r.integer("pipeline_stages", c.pipeline_stages, 1, "an integer in [1, 1024]"));
  r.check(c.pipeline_stages <= 1024 && c.world_size % c.pipeline_stages == 0,
          r.field("pipeline_stages"), " (", c.pipeline_stages, ") must divide ",
          r.field("world_size"), " (", c.world_size, ")");
  c.micro_batches = r.integer("micro_batches", c.micro_batches, 0,
                              "a non-negative integer (0: train's default)");
  r.check(c.micro_batches <= t.batch_size, r.field("micro_batches"), " (", c.micro_batches,
          ") must not exceed ", r.field("batch_size"), " (", t.batch_size, ")");
  c.pipeline_schedule = r.name("pipeline_schedule", c.pipeline_schedule, {"gpipe", "1f1b"});
  c.pipeline_split = r.string("pipeline_split", c.pipeline_split);
  try {
    parse_pipeline_split(c.pipeline_split, c.pipeline_stages, r.field("pipeline_split"));
  } catch (const Error& e) {
    r.check(false, e.what());
  }
  c.tensor_parallel = static_cast<int>(
      r.integer("tensor_parallel", c.tensor_parallel, 1, "an integer in [1, 1024]"));
  r.check(c.tensor_parallel <= 1024 && c.world_size % c.tensor_parallel == 0,
          r.field("tensor_parallel"), " (", c.tensor_parallel, ") must divide ",
          r.field("world_size"), " (", c.world_size, ")");
  r.check(c.world_size % c.ranks_per_replica() == 0, r.field("pipeline_stages"), " (",
          c.pipeline_stages, ") × ", r.field("tensor_parallel"), " (", c.tensor_parallel,
          ") must divide ", r.field("world_size"), " (", c.world_size, ")");
  t.seed = r.unsigned_integer("seed", t.seed);
  t.momentum = r.number("momentum", t.momentum, is_non_negative, "a non-negative number");
  t.weight_decay =
      r.number("weight_decay", t.weight_decay, is_non_negative, "a non-negative number");
  t.clip_grad_norm = r.number("clip_grad_norm", t.clip_grad_norm, is_non_negative,
                              "a non-negative number (0: off)");
  t.eval_batch_size = r.integer("eval_batch_size", t.eval_batch_size, 1, "a positive integer");
  t.eval_every = r.integer("eval_every", t.eval_every, 0, "a non-negative integer");
  t.memory_format = parse_memory_format(
      r.name("memory_format", to_string(t.memory_format), {"contiguous", "channels-last"}));
  return c;
}

// ---- results, stages, trials, quality -------------------------------------------------------

json result_to_json(const PlanResult& r) {
  return {{"samples_per_s", r.samples_per_s},
          {"spread", r.spread},
          {"peak_memory_bytes", r.peak_memory_bytes},
          {"validation_metric", r.validation_metric},
          {"final_loss", r.final_loss},
          {"phases_ms",
           {{"data_wait", r.phases.data_wait_ms},
            {"host_to_device", r.phases.host_to_device_ms},
            {"forward", r.phases.forward_ms},
            {"backward", r.phases.backward_ms},
            {"optimizer", r.phases.optimizer_ms},
            {"communication", r.phases.communication_ms},
            {"other", r.phases.other_ms},
            {"step", r.phases.step_ms}}}};
}

PlanResult result_from_json(const FieldReader& r) {
  PlanResult p;
  p.samples_per_s =
      r.number("samples_per_s", p.samples_per_s, is_non_negative, "a non-negative number");
  p.spread = r.number("spread", p.spread, is_non_negative, "a non-negative number");
  p.peak_memory_bytes =
      r.integer("peak_memory_bytes", p.peak_memory_bytes, 0, "a non-negative integer");
  p.validation_metric = r.number("validation_metric", p.validation_metric);
  p.final_loss = r.number("final_loss", p.final_loss);
  const FieldReader ph = r.object("phases_ms");
  PhaseBreakdown& m = p.phases;
  for (auto [key, value] : {std::pair<const char*, double*>{"data_wait", &m.data_wait_ms},
                            {"host_to_device", &m.host_to_device_ms},
                            {"forward", &m.forward_ms},
                            {"backward", &m.backward_ms},
                            {"optimizer", &m.optimizer_ms},
                            {"communication", &m.communication_ms},
                            {"other", &m.other_ms},
                            {"step", &m.step_ms}}) {
    *value = ph.number(key, *value, is_non_negative, "a non-negative number");
  }
  return p;
}

json stage_to_json(const PlanStage& s) {
  return {{"name", s.name},
          {"before_samples_per_s", s.before_samples_per_s},
          {"after_samples_per_s", s.after_samples_per_s},
          {"changed", s.changed},
          {"why", s.why}};
}

PlanStage stage_from_json(const FieldReader& r) {
  PlanStage s;
  s.name = r.string("name", s.name);
  s.before_samples_per_s = r.number("before_samples_per_s", s.before_samples_per_s, is_non_negative,
                                    "a non-negative number");
  s.after_samples_per_s = r.number("after_samples_per_s", s.after_samples_per_s, is_non_negative,
                                   "a non-negative number");
  s.changed = r.boolean("changed", s.changed);
  s.why = r.string("why", s.why);
  return s;
}

json trial_to_json(const PlanTrial& t) {
  return {{"stage", t.stage},
          {"purpose", t.purpose},
          {"config", config_to_json(t.config)},
          {"outcome", t.fits ? "fits" : "oom"},
          {"samples_per_s", t.samples_per_s},
          {"spread", t.spread},
          {"peak_memory_bytes", t.peak_memory_bytes},
          {"steps", t.steps}};
}

PlanTrial trial_from_json(const FieldReader& r) {
  PlanTrial t;
  t.stage = r.string("stage", t.stage);
  t.purpose = r.string("purpose", t.purpose);
  t.config = config_from_json(r.object("config"));
  t.fits = r.name("outcome", "oom", {"fits", "oom"}) == "fits";
  t.samples_per_s =
      r.number("samples_per_s", t.samples_per_s, is_non_negative, "a non-negative number");
  t.spread = r.number("spread", t.spread, is_non_negative, "a non-negative number");
  t.peak_memory_bytes =
      r.integer("peak_memory_bytes", t.peak_memory_bytes, 0, "a non-negative integer");
  t.steps = r.integer("steps", t.steps, 0, "a non-negative integer");
  return t;
}

json quality_to_json(const QualityCheck& q) {
  return {{"status", to_string(q.status)},
          {"metric", q.metric},
          {"metric_noise", q.metric_noise},
          {"loss_noise", q.loss_noise},
          {"val_samples", q.val_samples},
          {"val_fraction", q.val_fraction},
          {"baseline", q.baseline},
          {"tuned", q.tuned},
          {"baseline_loss", q.baseline_loss},
          {"tuned_loss", q.tuned_loss},
          {"baseline_losses", q.baseline_losses},
          {"tuned_losses", q.tuned_losses},
          {"tolerance", q.tolerance},
          {"samples", q.samples},
          {"accepted", q.accepted},
          {"why", q.why}};
}

QualityCheck quality_from_json(const FieldReader& r) {
  QualityCheck q;
  const std::string status = r.name("status", to_string(q.status), quality_status_names());
  for (size_t i = 0; i < quality_status_names().size(); ++i)
    if (quality_status_names()[i] == status) q.status = static_cast<QualityStatus>(i);
  q.metric = r.string("metric", q.metric);
  q.metric_noise = r.number("metric_noise", q.metric_noise);
  q.loss_noise = r.number("loss_noise", q.loss_noise);
  q.val_samples = r.integer("val_samples", q.val_samples, 0, "a non-negative integer");
  q.val_fraction = r.number("val_fraction", q.val_fraction, [](double v) { return v >= 0 && v < 0.5; },
                            "a fraction in [0, 0.5)");
  q.baseline = r.number("baseline", q.baseline);
  q.tuned = r.number("tuned", q.tuned);
  q.baseline_loss = r.number("baseline_loss", q.baseline_loss);
  q.tuned_loss = r.number("tuned_loss", q.tuned_loss);
  q.baseline_losses = r.numbers("baseline_losses");
  q.tuned_losses = r.numbers("tuned_losses");
  q.tolerance = r.number("tolerance", q.tolerance, is_non_negative, "a non-negative number");
  q.samples = r.integer("samples", q.samples, 0, "a non-negative integer");
  q.accepted = r.boolean("accepted", q.accepted);
  q.why = r.string("why", q.why);
  return q;
}

json exec_to_json(const PlanExec& e) {
  json maps = json::array();
  for (const auto& [name, flag] : e.maps) maps.push_back({{"setting", name}, {"flag", flag}});
  return {{"command", e.command},
          {"maps", maps},
          {"metrics", e.metrics_on_stdout ? "stdout" : "file"},
          {"settings", e.settings},
          {"applied", e.applied},
          {"reproduce", e.reproduce},
          {"defaults", e.defaults},
          {"defaults_samples_per_s", e.defaults_samples_per_s},
          {"runs", e.runs}};
}

PlanExec exec_from_json(const FieldReader& r) {
  r.check_keys({"command", "maps", "metrics", "settings", "applied", "reproduce", "defaults",
                "defaults_samples_per_s", "runs"});
  PlanExec e;
  e.command = r.strings("command");
  r.check(!e.command.empty(), r.field("command"), " must name the program to run");
  r.each("maps", [&](const FieldReader& m) {
    e.maps.emplace_back(m.name("setting", "", exec_setting_names()), m.string("flag", ""));
  });
  e.metrics_on_stdout = r.name("metrics", "file", {"file", "stdout"}) == "stdout";
  e.settings = r.string_map("settings");
  for (const auto& [name, value] : e.settings) {
    const auto& names = exec_setting_names();
    r.check(std::find(names.begin(), names.end(), name) != names.end(), r.field("settings"),
            ": unknown setting '", name, "'", did_you_mean(name, names));
  }
  e.applied = r.strings("applied");
  e.reproduce = r.string("reproduce", "");
  e.defaults = r.string_map("defaults");
  e.defaults_samples_per_s =
      r.number("defaults_samples_per_s", 0, is_non_negative, "a non-negative number");
  e.runs = r.integer("runs", 0, 0, "a non-negative integer");
  return e;
}

}  // namespace

namespace {

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json goodput_to_json(const GoodputChoice& g) {
  json curve = json::array();
  for (const GoodputPoint& p : g.curve)
    curve.push_back({{"batch_size", p.batch},
                     {"samples_per_s", p.samples_per_s},
                     {"efficiency", p.efficiency},
                     {"predicted_speedup", p.speedup}});
  json branches = json::array();
  for (const GoodputBranch& b : g.branches)
    branches.push_back({{"batch_size", b.batch},
                        {"lr", b.lr},
                        {"samples", b.samples},
                        {"predicted_efficiency", b.predicted_efficiency},
                        {"measured_efficiency", finite_or_null(b.measured_efficiency)},
                        {"searched_up", b.searched_up},
                        {"diverged", b.diverged},
                        {"accepted", b.accepted},
                        {"slower", b.slower},
                        {"phi_after", finite_or_null(b.phi_after)}});
  json noise = noise_scale_to_json(g.noise);
  noise["kind"] = g.noise_kind;
  return {{"usable", g.usable},
          {"noise_scale", noise},
          {"phi_used", g.phi_used},
          {"user_batch", g.b0},
          {"chosen_batch", g.chosen},
          {"predicted_speedup", g.predicted_speedup},
          {"gain", g.gain},
          {"lr_multiplier", g.lr_multiplier},
          {"lr_rule", g.rule},
          {"why", g.why},
          {"curve", curve},
          {"guard_branches", branches}};
}

// What later runs read back (train --adaptive-batch takes the curve); the guard's branches stay
// in the file only.
GoodputChoice goodput_from_json(const FieldReader& r) {
  GoodputChoice g;
  g.usable = r.boolean("usable", false);
  const FieldReader n = r.object("noise_scale");
  g.noise.phi = n.number("phi", std::numeric_limits<double>::quiet_NaN());
  g.noise.low = n.number("low", std::numeric_limits<double>::quiet_NaN());
  g.noise.high = n.number("high", std::numeric_limits<double>::infinity());
  g.noise.steps = n.integer("steps", 0, 0, "a non-negative integer");
  g.noise.b_small = n.number("b_small", 0, is_non_negative, "a non-negative number");
  g.noise.b_big = n.number("b_big", 0, is_non_negative, "a non-negative number");
  g.noise_kind = n.string("kind", "raw");
  g.phi_used = r.number("phi_used", 0, is_non_negative, "a non-negative number");
  g.b0 = r.integer("user_batch", 0, 0, "a non-negative integer");
  g.chosen = r.integer("chosen_batch", 0, 0, "a non-negative integer");
  g.predicted_speedup = r.number("predicted_speedup", 1, is_non_negative, "a non-negative number");
  g.gain = r.number("gain", 1, is_non_negative, "a non-negative number");
  g.lr_multiplier = r.number("lr_multiplier", 1, is_non_negative, "a non-negative number");
  g.rule = r.string("lr_rule", "");
  g.why = r.string("why", "");
  r.each("curve", [&g](const FieldReader& p) {
    GoodputPoint point;
    point.batch = p.integer("batch_size", 1, 1, "a positive integer");
    point.samples_per_s = p.number("samples_per_s", 0, is_non_negative, "a non-negative number");
    point.efficiency = p.number("efficiency", 1, is_non_negative, "a non-negative number");
    point.speedup = p.number("predicted_speedup", 1, is_non_negative, "a non-negative number");
    g.curve.push_back(point);
  });
  return g;
}

}  // namespace

nlohmann::json to_json(const Plan& plan) {
  json trials = json::array();
  for (const auto& t : plan.trials) trials.push_back(trial_to_json(t));
  json stages = json::array();
  for (const auto& s : plan.stages) stages.push_back(stage_to_json(s));
  json j = {
      {"schema_version", plan.schema_version},
      {"model", plan.model},
      {"data", plan.data},
      {"device", plan.device},
      {"config", config_to_json(plan.config)},
      {"effective_batch", {{"policy", to_string(plan.effective_batch)}, {"why", plan.effective_batch_why}}},
      {"memory_limit_bytes", plan.memory_limit_bytes},
      {"reserve", plan.reserve},
      {"baseline", result_to_json(plan.baseline)},
      {"tuned", result_to_json(plan.tuned)},
      {"stages", stages},
      {"trials", trials},
      {"quality", quality_to_json(plan.quality)},
      {"probe_steps", plan.probe_steps},
      {"tune_wall_s", plan.tune_wall_s},
      {"budget_s", plan.budget_s},
      {"interrupted", plan.interrupted},
      {"denormals", plan.denormals},
      {"input",
       {{"crop", plan.crop},
        {"pad", plan.pad},
        {"flip", plan.flip},
        {"seq_len", plan.seq_len},
        {"cache", plan.cache}}},
      {"evaluation",
       {{"batch_size", plan.config.train.eval_batch_size},
        {"samples_per_s", plan.eval_samples_per_s},
        {"peak_memory_bytes", plan.eval_peak_memory_bytes}}}};
  if (!plan.exec.empty()) j["exec"] = exec_to_json(plan.exec);
  if (plan.goodput.noise.steps > 0) j["goodput"] = goodput_to_json(plan.goodput);
  return j;
}

Plan plan_from_json(const nlohmann::json& j, const std::string& source) {
  SATURATE_CHECK(j.is_object(), source, ": a plan must be a JSON object, got ", j.type_name());
  const FieldReader r(j, source, "");
  Plan p;
  SATURATE_CHECK(
      r.find("schema_version"), source,
      ": schema_version is missing; a plan starts with \"schema_version\": ", kPlanSchemaVersion);
  const int64_t version = r.integer("schema_version", 0, 0, "an integer");
  SATURATE_CHECK(version == kPlanSchemaVersion, source, ": schema_version ", version,
                 " is not supported; this saturate reads version ", kPlanSchemaVersion,
                 " (re-run saturate tune to write a new plan)");
  // A plan's reason to exist; without it this is probably another JSON file (a run summary).
  SATURATE_CHECK(r.find("config"), source,
                 ": config is missing; a plan needs at least {\"schema_version\": 1, "
                 "\"config\": {\"batch_size\": N}}");
  r.check_keys(kTopLevelKeys);
  p.model = r.string("model", p.model);
  p.data = r.string("data", p.data);
  p.device = r.string("device", p.device);
  p.config = config_from_json(r.object("config"));
  const FieldReader eb = r.object("effective_batch");
  p.effective_batch = parse_effective_batch_outcome(
      eb.name("policy", to_string(p.effective_batch), effective_batch_outcome_names()));
  p.effective_batch_why = eb.string("why", p.effective_batch_why);
  p.memory_limit_bytes =
      r.integer("memory_limit_bytes", p.memory_limit_bytes, 0, "a non-negative integer");
  p.reserve = r.number("reserve", p.reserve, is_fraction, "a fraction in [0, 1)");
  p.baseline = result_from_json(r.object("baseline"));
  p.tuned = result_from_json(r.object("tuned"));
  r.each("stages", [&](const FieldReader& s) { p.stages.push_back(stage_from_json(s)); });
  r.each("trials", [&](const FieldReader& t) { p.trials.push_back(trial_from_json(t)); });
  p.quality = quality_from_json(r.object("quality"));
  p.probe_steps = r.integer("probe_steps", p.probe_steps, 0, "a non-negative integer");
  p.tune_wall_s = r.number("tune_wall_s", p.tune_wall_s, is_non_negative, "a non-negative number");
  p.budget_s = r.number("budget_s", p.budget_s, is_non_negative, "a non-negative number");
  p.interrupted = r.boolean("interrupted", p.interrupted);
  p.denormals = r.name("denormals", p.denormals, {"flush", "keep"});
  const FieldReader in = r.object("input");
  in.check_keys({"crop", "pad", "flip", "seq_len", "cache"});
  p.crop = in.integer("crop", p.crop, 0, "a non-negative integer");
  p.pad = in.integer("pad", p.pad, 0, "a non-negative integer");
  p.flip = in.boolean("flip", p.flip);
  p.seq_len = in.integer("seq_len", p.seq_len, 0, "a non-negative integer");
  p.cache = in.string("cache", p.cache);
  // config.eval_batch_size is what train uses; "evaluation" reports what tune measured there.
  const FieldReader ev = r.object("evaluation");
  ev.check_keys({"batch_size", "samples_per_s", "peak_memory_bytes"});
  p.eval_samples_per_s =
      ev.number("samples_per_s", p.eval_samples_per_s, is_non_negative, "a non-negative number");
  p.eval_peak_memory_bytes =
      ev.integer("peak_memory_bytes", p.eval_peak_memory_bytes, 0, "a non-negative integer");
  if (r.find("exec")) p.exec = exec_from_json(r.object("exec"));
  if (r.find("goodput")) p.goodput = goodput_from_json(r.object("goodput"));
  return p;
}

void write_plan(const Plan& plan, const std::string& path) { write_json_file(path, to_json(plan)); }

Plan read_plan(const std::string& path) { return plan_from_json(read_json_file(path), path); }

}  // namespace saturate
