// SPDX-License-Identifier: Apache-2.0
#include "saturate/diagnose/diagnose.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "saturate/core/error.h"
#include "saturate/core/json.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"

namespace saturate {
namespace {

using detail::concat;

// Each phase's share of the steady steps' summed wall time, in percent.
struct Shares {
  int64_t steps = 0;
  double step_ms = 0;  // mean over the steady steps
  double data_wait = 0, host_to_device = 0, forward = 0, backward = 0, optimizer = 0,
         communication = 0, other = 0;
  bool split = true;  // false: "other" is the program's compute (--exec)
};

Shares phase_shares(const RunFacts& f) {
  Shares s;
  s.split = f.phases_split;
  double total = 0, data = 0, h2d = 0, fwd = 0, bwd = 0, opt = 0, comm = 0, other = 0;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, f.warmup_steps)); i < f.steps.size();
       ++i) {
    const StepRecord& r = f.steps[i];
    total += r.step_ms;
    data += r.data_wait_ms;
    h2d += r.host_to_device_ms;
    fwd += r.forward_ms;
    bwd += r.backward_ms;
    opt += r.optimizer_ms;
    comm += r.communication_ms;
    other += r.other_ms;
    ++s.steps;
  }
  if (s.steps == 0 || total <= 0) return s;
  s.step_ms = total / static_cast<double>(s.steps);
  const double k = 100.0 / total;
  s.data_wait = data * k;
  s.host_to_device = h2d * k;
  s.forward = fwd * k;
  s.backward = bwd * k;
  s.optimizer = opt * k;
  s.communication = comm * k;
  // What this rank waited beyond the slowest rank's wait was waiting for that rank (the
  // rank-skew rule's business), not for the network.
  if (f.rank_communication_ms.size() > 1) {
    const double least =
        *std::min_element(f.rank_communication_ms.begin(), f.rank_communication_ms.end());
    s.communication = std::min(s.communication, 100.0 * least / s.step_ms);
  }
  s.other = other * k;
  return s;
}

bool on_gpu(const RunFacts& f) { return f.device.rfind("cuda", 0) == 0; }

std::string pct(double v) { return format_fixed(v, 1) + "%"; }

Finding make(const char* rule, Severity severity, std::string title,
             std::vector<Evidence> evidence, std::string recommendation) {
  Finding f;
  f.rule = rule;
  f.severity = severity;
  f.title = std::move(title);
  f.evidence = std::move(evidence);
  f.recommendation = std::move(recommendation);
  return f;
}

void input_bound(const RunFacts& f, const Shares& s, const DiagnoseThresholds& t,
                 std::vector<Finding>& out) {
  if (s.steps == 0 || s.data_wait <= t.input_bound_pct) return;
  const Severity sev =
      s.data_wait > t.input_bound_critical_pct ? Severity::kCritical : Severity::kWarning;
  std::string rec;
  if (f.workers == 0) {
    rec = "make batches on worker threads: --workers " +
          std::to_string(std::max(2, f.cores_usable > 0 ? f.cores_usable / 2 : 2)) +
          " --prefetch 4; `saturate tune` sizes both";
  } else {
    rec = concat("raise --workers above ", f.workers,
                 " and --prefetch, keep decoded samples with --cache SIZE, or pack the data with "
                 "`saturate pack` so reads are one memcpy");
  }
  if (f.workers_measured > f.workers)
    rec = concat("the tune measured up to ", f.workers_measured, " workers and kept ", f.workers,
                 " (more were no faster here): make each sample cheaper instead — decode once "
                 "and cache, pack the data, or move per-sample transforms into the batch");
  // Workers busy all the time are the bottleneck themselves: more of them only help while
  // cores are free; otherwise each sample must cost less.
  std::string busy;
  if (!f.input_worker_cores.empty()) {
    double sum = 0;
    for (double c : f.input_worker_cores) sum += c;
    const double each = sum / static_cast<double>(f.input_worker_cores.size());
    if (each >= 0.8) {
      busy = concat("; its ", f.input_worker_cores.size(), " input workers are CPU-bound (",
                    format_fixed(each, 2), " cores each)");
      rec = f.cores_usable > 0 && sum + 1.5 > f.cores_usable
                ? concat("the workers already use ", format_fixed(sum, 1), " of ", f.cores_usable,
                         " cores: make each sample cheaper (decode once and cache, move "
                         "augmentation to the device, pack the data) rather than add workers")
                : concat("the workers are busy all the time and cores are free: raise the "
                         "workers above ", f.input_worker_cores.size());
    }
  }
  out.push_back(make("input-bound", sev,
                     concat("input-bound: the step waits for data ", pct(s.data_wait),
                            " of its time", busy),
                     {{"data_wait_share", s.data_wait, "%"},
                      {"data_wait_ms_per_step", s.data_wait * s.step_ms / 100.0, "ms"},
                      {"workers", static_cast<double>(f.workers), ""}},
                     std::move(rec)));
}

double global_batch(const RunFacts& f) {
  return static_cast<double>(f.global_batch > 0 ? f.global_batch : f.batch_size);
}

void small_batch(const RunFacts& f, const Shares& s, const DiagnoseThresholds& t,
                 std::vector<Finding>& out) {
  if (on_gpu(f)) {
    if (f.gpu_util_pct < 0 || f.gpu_util_pct >= t.low_gpu_util_pct) return;
    // A starved device is the input pipeline's finding, not the batch's.
    if (s.steps > 0 && s.data_wait > t.input_bound_pct) return;
    out.push_back(make("small-batch", Severity::kWarning,
                       concat("low device utilisation: the GPU is busy ", pct(f.gpu_util_pct),
                              " of the time at batch ", f.batch_size),
                       {{"gpu_util", f.gpu_util_pct, "%"},
                        {"batch_size", static_cast<double>(f.batch_size), ""}},
                       "raise --batch-size (`saturate tune` finds the largest that fits and is "
                       "fastest) so each kernel does more work"));
    return;
  }
  // No step time (a configuration that was not measured) says nothing about its size.
  if (s.steps == 0 || !(s.step_ms > 0) || s.step_ms >= t.tiny_step_ms) return;
  // Past the measured noise scale a larger batch buys samples/s with samples.
  const bool past_noise = f.noise.is_resolved() && global_batch(f) > f.noise.high;
  out.push_back(make("small-batch", Severity::kInfo,
                     concat("tiny steps: ", format_fixed(s.step_ms, 2), " ms per step at batch ",
                            f.batch_size, ", so fixed per-step costs weigh heavily"),
                     {{"step_ms", s.step_ms, "ms"},
                      {"batch_size", static_cast<double>(f.batch_size), ""}},
                     past_noise
                         ? concat("raise --batch-size only if the throughput pays for the "
                                  "samples: the batch is already above the gradient noise "
                                  "scale (",
                                  format_fixed(f.noise.phi, 0),
                                  "), so each added sample adds less; `saturate tune` weighs both")
                         : "raise --batch-size (`saturate tune` measures where samples/s peaks)"));
}

// The batch against the measured gradient noise scale φ: far above it, most samples of a step
// repeat what the others say; far below it, each step's gradient is mostly noise.
void critical_batch(const RunFacts& f, const DiagnoseThresholds& t, std::vector<Finding>& out) {
  const NoiseScaleEstimate& n = f.noise;
  const double b = global_batch(f);
  if (!n.is_resolved() || b <= 0) return;
  const std::string phi = format_fixed(n.phi, 0);
  const std::vector<Evidence> evidence = {{"global_batch", b, "samples"},
                                          {"noise_scale", n.phi, "samples"},
                                          {"noise_scale_low", n.low, "samples"},
                                          {"noise_scale_high", n.high, "samples"}};
  const std::string measured =
      concat("the ", f.noise_kind, " gradient noise scale measured ", phi, " (95%: ",
             format_fixed(n.low, 0), "–", format_fixed(n.high, 0), ")");
  if (b > t.critical_batch_factor * n.high) {
    const double waste = 100.0 * b / (n.phi + b);
    out.push_back(make(
        "above-critical-batch", Severity::kInfo,
        concat("batch far above the critical batch: about ", format_fixed(waste, 0),
               "% of each step's samples add little (", measured, ", batch ",
               format_fixed(b, 0), ")"),
        evidence,
        concat("a step of ", format_fixed(b, 0), " samples needs about ",
               format_fixed(1 + b / n.phi, 1),
               "× the fewest samples to make the same progress (McCandlish et al. 2018); a "
               "batch nearer ", phi,
               " with the LR scaled down by the gain rule gets there on fewer samples, unless "
               "this batch's throughput pays for them: `saturate tune` weighs both")));
  } else if (b * t.critical_batch_factor < n.low) {
    const double more = 1 + n.phi / b;
    out.push_back(make(
        "below-critical-batch", Severity::kInfo,
        concat("batch far below the critical batch: about ", format_fixed(more, 1),
               "× more steps than needed (", measured, ", batch ", format_fixed(b, 0), ")"),
        evidence,
        concat("each step's gradient is mostly noise, so the run takes about ",
               format_fixed(more, 1),
               "× the fewest steps; a larger batch (up to about ", phi,
               ") with the LR raised by the gain rule makes the same progress in fewer steps: "
               "`saturate tune` measures whether its throughput pays")));
  }
}

void memory_near_limit(const RunFacts& f, const DiagnoseThresholds& t,
                       std::vector<Finding>& out) {
  if (f.memory_limit_bytes <= 0 || f.peak_memory_bytes <= 0) return;
  const double used = 100.0 * static_cast<double>(f.peak_memory_bytes) /
                      static_cast<double>(f.memory_limit_bytes);
  if (used <= t.memory_near_limit_pct) return;
  std::vector<std::string> options;
  if (f.precision == "fp32" || f.precision == "tf32") options.push_back("--precision bf16");
  if (f.recompute_segments == 0) options.push_back("--recompute-segments 2");
  options.push_back(concat("--accumulate ", f.accumulate * 2, " with half the batch"));
  out.push_back(make("memory-near-limit", used >= 100.0 ? Severity::kCritical : Severity::kWarning,
                     concat("memory near the limit: peak ", format_bytes(f.peak_memory_bytes),
                            " is ", pct(used), " of ", format_bytes(f.memory_limit_bytes)),
                     {{"peak_memory", static_cast<double>(f.peak_memory_bytes), "bytes"},
                      {"memory_limit", static_cast<double>(f.memory_limit_bytes), "bytes"},
                      {"used", used, "%"}},
                     concat("leave headroom for larger inputs and fragmentation: ",
                            join(options, ", or "))));
}

void precision_unused(const RunFacts& f, std::vector<Finding>& out) {
  if (f.precision != "fp32" && f.precision != "tf32") return;
  const char* fast = f.bf16_fast ? "bf16" : f.fp16_fast ? "fp16" : nullptr;
  if (fast == nullptr) return;
  out.push_back(make("precision-unused", Severity::kWarning,
                     concat("mixed precision unused: training runs in ", f.precision, " on ",
                            f.device, ", which runs ", fast, " much faster"),
                     {{"bf16_fast", f.bf16_fast ? 1.0 : 0.0, ""},
                      {"fp16_fast", f.fp16_fast ? 1.0 : 0.0, ""}},
                     concat("--precision ", fast,
                            " (`saturate tune` checks the loss and validation still hold)")));
}

// SDPA's math kernel materialises the T×T attention scores in memory and runs them as plain
// matmuls and a softmax; the fused kernels (flash, memory-efficient, cuDNN) do not.
void attention_math(const RunFacts& f, std::vector<Finding>& out) {
  if (f.attention_kernel != "math") return;
  out.push_back(make(
      "attention-math", Severity::kWarning,
      concat("attention falls back to SDPA's math kernel on ", f.device, " (", f.precision,
             "), which stores every T×T score matrix"),
      {},
      on_gpu(f) ? "the flash kernel needs fp16 or bf16 (--precision bf16) on an sm80+ GPU and "
                  "head sizes up to 256; the memory-efficient one takes fp32 but no attention "
                  "dropout above 0 on older builds: try --precision bf16 or dropout=0"
                : "the CPU flash kernel takes no attention dropout: set the model's dropout=0 "
                  "(e.g. gpt-mini:dropout=0) or use more data instead of dropout"));
}

void pageable_copies(const RunFacts& f, const Shares& s, const DiagnoseThresholds& t,
                     std::vector<Finding>& out) {
  if (!on_gpu(f) || s.steps == 0 || s.host_to_device <= t.copy_share_pct) return;
  out.push_back(make(
      "copies-not-overlapped", Severity::kWarning,
      concat("host→device copies take ", pct(s.host_to_device), " of the step",
             f.pinned_memory ? "" : " from pageable memory"),
      {{"host_to_device_share", s.host_to_device, "%"},
       {"pinned_memory", f.pinned_memory ? 1.0 : 0.0, ""}},
      f.pinned_memory
          ? "copy on a side stream ahead of the step: --workers 1 or more makes the loader copy "
            "the next batch while this one trains"
          : "use page-locked batch buffers and asynchronous copies: saturate's loader does both "
            "on a GPU (--workers 1 or more overlaps them with the step)"));
}

void cpu_bound_environment(const RunFacts& f, const DiagnoseThresholds& t,
                           std::vector<Finding>& out) {
  std::string lower = f.blas;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool reference_name = lower.find("reference") != std::string::npos ||
                              lower == "blas" || lower == "netlib";
  const double floor =
      t.slow_gemm_gflops_per_core * static_cast<double>(std::max(1, f.cores_usable));
  const bool slow_gemm = f.gemm_gflops >= 0 && f.gemm_gflops < floor;
  if (reference_name || slow_gemm) {
    out.push_back(make(
        "reference-blas", Severity::kCritical,
        slow_gemm ? concat("slow BLAS: a float32 GEMM runs at ", format_fixed(f.gemm_gflops, 1),
                           " GFLOP/s (", f.blas.empty() ? "unknown BLAS" : f.blas,
                           "); an optimised BLAS does ~", format_fixed(floor * 5, 0), "+ here")
                  : concat("reference BLAS in use (", f.blas, "): matrix products run ~35x slower "
                           "than OpenBLAS or MKL"),
        {{"gemm_gflops", f.gemm_gflops, "GFLOP/s"},
         {"cores_usable", static_cast<double>(f.cores_usable), ""}},
        "install an optimised BLAS (Debian: apt install libopenblas0-pthread, then "
        "update-alternatives --config libblas.so.3-x86_64-linux-gnu) or use PyPI's LibTorch, "
        "which bundles MKL"));
  }
  if (f.intra_op_threads > 0 && f.cores_usable > 0 && f.intra_op_threads < f.cores_usable &&
      !on_gpu(f)) {
    out.push_back(make("threads-below-cores", Severity::kWarning,
                       concat("CPU-bound with idle cores: ", f.intra_op_threads,
                              " intra-op thread(s) on ", f.cores_usable, " usable cores"),
                       {{"intra_op_threads", static_cast<double>(f.intra_op_threads), ""},
                        {"cores_usable", static_cast<double>(f.cores_usable), ""}},
                       concat("--threads ", f.cores_usable,
                              " (and unset OMP_NUM_THREADS/MKL_NUM_THREADS if they cap it)")));
  }
  if (f.gpu_present && !on_gpu(f)) {
    out.push_back(make("device-mismatch", Severity::kCritical,
                       concat("a GPU is present but training runs on ", f.device),
                       {{"gpu_present", 1.0, ""}},
                       "--device cuda (or --device auto, which picks the GPU)"));
  }
}

void throttling(const RunFacts& f, std::vector<Finding>& out) {
  std::vector<std::string> hard;
  for (const std::string& r : f.throttle_reasons) {
    // Idle and application-clock settings are not throttling under load.
    if (r.find("thermal") != std::string::npos || r.find("power") != std::string::npos ||
        r.find("slowdown") != std::string::npos) {
      hard.push_back(r);
    }
  }
  if (hard.empty()) return;
  out.push_back(make("throttling", Severity::kWarning,
                     concat("the GPU throttled: ", join(hard, ", ")),
                     {{"reasons", static_cast<double>(hard.size()), ""}},
                     "check cooling and the power limit (nvidia-smi -q -d PERFORMANCE); "
                     "measured speeds vary while it lasts"));
}

void phase_heavy(const Shares& s, const DiagnoseThresholds& t, std::vector<Finding>& out) {
  if (s.steps == 0) return;
  if (s.optimizer > t.optimizer_share_pct) {
    out.push_back(make("optimizer-heavy", Severity::kWarning,
                       concat("the optimizer step takes ", pct(s.optimizer), " of the step"),
                       {{"optimizer_share", s.optimizer, "%"},
                        {"optimizer_ms_per_step", s.optimizer * s.step_ms / 100.0, "ms"}},
                       "a larger batch spreads the per-step optimizer cost over more samples; "
                       "with many small parameter tensors, a fused optimizer helps"));
  }
  if (s.split && s.other > t.other_share_pct) {
    out.push_back(make("other-heavy", Severity::kWarning,
                       concat(pct(s.other), " of the step is outside the measured phases"),
                       {{"other_share", s.other, "%"}},
                       "look for host work between steps: logging every step, reading the loss "
                       "with .item() (a device sync), saving checkpoints; a --trace shows where"));
  }
  if (s.communication > t.communication_share_pct) {
    out.push_back(make("communication-heavy", Severity::kWarning,
                       concat("gradient all-reduce takes ", pct(s.communication), " of the step"),
                       {{"communication_share", s.communication, "%"}},
                       "all-reduce less often: --accumulate 2 or more (same effective batch), or "
                       "a larger per-rank batch"));
  }
}

// Python PyTorch's CPU tensors come from glibc malloc, which maps every block above its mmap
// threshold afresh and unmaps it on free; these settings (or a malloc that keeps freed memory)
// stop that. Measured in issue 14: batch 512 fmnist-cnn went from 1960 to 2325 samples/s.
constexpr const char* kPythonMallocFix =
    "LD_PRELOAD=libjemalloc.so.2 (Debian: apt-get install libjemalloc2) or "
    "MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296 "
    "MALLOC_TOP_PAD_=536870912";

void allocation_churn(const RunFacts& f, const Shares& s, const DiagnoseThresholds& t,
                      std::vector<Finding>& out) {
  if (s.steps == 0 || s.step_ms <= 0 || f.page_fault_us <= 0) return;
  const double faults =
      mean_page_faults(f.steps, static_cast<size_t>(std::max<int64_t>(0, f.warmup_steps)));
  if (faults < 0) return;
  const double fault_ms = faults * f.page_fault_us / 1000.0;
  const double share = 100.0 * fault_ms / s.step_ms;
  if (share <= t.allocation_churn_pct) return;
  std::string rec;
  if (!f.cpu_cache) {
    rec = "saturate's caching CPU allocator removes this and is off: unset SATURATE_CPU_CACHE";
  } else if (on_gpu(f)) {
    rec = "the faults are in host memory outside saturate's CPU allocator (pinned buffers, "
          "host copies made each step); keep host buffers across steps";
  } else {
    rec = "the faults are in memory outside saturate's CPU allocator (oneDNN/MKL scratch, "
          "malloc in a TorchScript op); preload a caching malloc";
  }
  rec += concat("; in a Python PyTorch job of this model, start it with ", kPythonMallocFix);
  out.push_back(make("allocation-churn", Severity::kWarning,
                     concat("allocation churn: ", format_fixed(faults, 0),
                            " page faults per step cost ~", format_fixed(fault_ms, 1), " ms, ",
                            pct(share), " of the step, faulting in fresh memory"),
                     {{"page_faults_per_step", faults, ""},
                      {"page_fault_us", f.page_fault_us, "us"},
                      {"fault_ms_per_step", fault_ms, "ms"},
                      {"fault_share", share, "%"}},
                     std::move(rec)));
}

void rank_skew(const RunFacts& f, const DiagnoseThresholds& t, std::vector<Finding>& out) {
  if (f.rank_step_ms.size() < 2) return;
  const auto [lo, hi] = std::minmax_element(f.rank_step_ms.begin(), f.rank_step_ms.end());
  if (*lo <= 0) return;
  const double skew = 100.0 * (*hi - *lo) / *lo;
  if (skew <= t.rank_skew_pct) return;
  const auto slow = hi - f.rank_step_ms.begin();
  out.push_back(make("rank-skew", Severity::kWarning,
                     concat("uneven ranks: rank ", slow, " takes ", format_fixed(*hi, 1),
                            " ms per step, ", pct(skew), " more than the fastest (",
                            format_fixed(*lo, 1), " ms); the others wait for it"),
                     {{"skew", skew, "%"},
                      {"slowest_rank", static_cast<double>(slow), ""},
                      {"slowest_ms", *hi, "ms"},
                      {"fastest_ms", *lo, "ms"}},
                     "balance the ranks: same device kind and clocks, equal data shards, no "
                     "other load on the slow rank's host"));
}

void stage_imbalance(const RunFacts& f, const DiagnoseThresholds& t, std::vector<Finding>& out) {
  const std::vector<double>& ms = f.stage_compute_ms;
  if (ms.size() < 2) return;
  const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
  if (*lo <= 0) return;
  const double over = 100.0 * (*hi - *lo) / *lo;
  if (over <= t.stage_imbalance_pct) return;
  const auto slow = hi - ms.begin(), fast = lo - ms.begin();
  out.push_back(make("stage-imbalance", Severity::kWarning,
                     concat("uneven pipeline stages: stage ", slow, " computes ",
                            format_fixed(*hi, 1), " ms per step, ", pct(over), " more than stage ",
                            fast, " (", format_fixed(*lo, 1), " ms); every stage waits for it"),
                     {{"imbalance", over, "%"},
                      {"slowest_stage", static_cast<double>(slow), ""},
                      {"slowest_ms", *hi, "ms"},
                      {"fastest_ms", *lo, "ms"}},
                     "move layers off the slow stage: --pipeline-split balanced (the default) "
                     "cuts by each layer's measured time, at the whole batch; with few layers, "
                     "fewer stages"));
}

void sort_by_severity(std::vector<Finding>& out) {
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return static_cast<int>(a.severity) > static_cast<int>(b.severity);
  });
}

}  // namespace

std::vector<Finding> diagnose_environment(const RunFacts& facts,
                                          const DiagnoseThresholds& thresholds) {
  std::vector<Finding> out;
  cpu_bound_environment(facts, thresholds, out);
  sort_by_severity(out);
  return out;
}

std::vector<Finding> diagnose(const RunFacts& facts, const DiagnoseThresholds& thresholds) {
  const Shares shares = phase_shares(facts);
  std::vector<Finding> out;
  input_bound(facts, shares, thresholds, out);
  small_batch(facts, shares, thresholds, out);
  memory_near_limit(facts, thresholds, out);
  precision_unused(facts, out);
  attention_math(facts, out);
  pageable_copies(facts, shares, thresholds, out);
  cpu_bound_environment(facts, thresholds, out);
  throttling(facts, out);
  phase_heavy(shares, thresholds, out);
  allocation_churn(facts, shares, thresholds, out);
  rank_skew(facts, thresholds, out);
  stage_imbalance(facts, thresholds, out);
  critical_batch(facts, thresholds, out);
  sort_by_severity(out);
  return out;
}

std::vector<Finding> diagnose_stages(const RunFacts& facts, const DiagnoseThresholds& thresholds) {
  std::vector<Finding> out;
  stage_imbalance(facts, thresholds, out);
  return out;
}

std::string to_string(Severity s) {
  switch (s) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kCritical:
      return "critical";
  }
  return "info";
}

nlohmann::json findings_to_json(const std::vector<Finding>& findings) {
  nlohmann::json out = nlohmann::json::array();
  for (const Finding& f : findings) {
    nlohmann::json evidence = nlohmann::json::array();
    for (const Evidence& e : f.evidence)
      evidence.push_back({{"name", e.name}, {"value", e.value}, {"unit", e.unit}});
    out.push_back({{"rule", f.rule},
                   {"severity", to_string(f.severity)},
                   {"title", f.title},
                   {"evidence", evidence},
                   {"recommendation", f.recommendation}});
  }
  return out;
}

std::vector<Finding> findings_from_json(const nlohmann::json& j, const std::string& where) {
  SATURATE_CHECK(j.is_array(), where, ": expected an array of findings");
  std::vector<Finding> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = concat(where, "[", i, "]");
    const nlohmann::json& x = j[i];
    SATURATE_CHECK(x.is_object(), at, ": expected an object");
    Finding f;
    f.rule = json_get<std::string>(x, "rule", at, "");
    SATURATE_CHECK(!f.rule.empty(), at, ".rule: missing");
    const std::string severity = json_get<std::string>(x, "severity", at, "info");
    if (severity == "critical") {
      f.severity = Severity::kCritical;
    } else if (severity == "warning") {
      f.severity = Severity::kWarning;
    } else {
      SATURATE_CHECK(severity == "info", at, ".severity: expected info, warning or critical, got '",
                     severity, "'");
    }
    f.title = json_get<std::string>(x, "title", at, "");
    f.recommendation = json_get<std::string>(x, "recommendation", at, "");
    if (x.contains("evidence")) {
      SATURATE_CHECK(x["evidence"].is_array(), at, ".evidence: expected an array");
      for (const nlohmann::json& e : x["evidence"]) {
        f.evidence.push_back({json_get<std::string>(e, "name", at + ".evidence", ""),
                              json_get<double>(e, "value", at + ".evidence", 0.0),
                              json_get<std::string>(e, "unit", at + ".evidence", "")});
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace saturate
