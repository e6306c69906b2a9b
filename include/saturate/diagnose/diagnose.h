// SPDX-License-Identifier: Apache-2.0
#pragma once
// Diagnosis: rules over what a run measured (its step records, device samples, device and
// configuration) that say what holds it back, with the numbers that show it and what to change.
// Plain data in, plain data out: no LibTorch, so every rule is tested with hand-made profiles.
//
//   RunFacts facts;  facts.steps = records;  facts.batch_size = 64;  ...
//   for (const Finding& f : diagnose(facts))
//     std::cout << to_string(f.severity) << "  " << f.title << "\n    → " << f.recommendation;

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "saturate/telemetry/noise_scale.h"
#include "saturate/telemetry/step_record.h"

namespace saturate {

enum class Severity { kInfo, kWarning, kCritical };

/// One measured number behind a finding.
struct Evidence {
  std::string name;  ///< "data_wait_share_pct"
  double value = 0;
  std::string unit;  ///< "%", "ms", "GFLOP/s", "bytes", ""
};

struct Finding {
  std::string rule;  ///< a stable id: "input-bound", "reference-blas", …
  Severity severity = Severity::kInfo;
  std::string title;           ///< one line with the key number
  std::vector<Evidence> evidence;
  std::string recommendation;  ///< what to change: a flag, a command, a setting
};

/// What a run measured and how it was set up. Unknown numbers stay at their defaults (-1 or 0,
/// as each says) and the rules that need them stay quiet.
struct RunFacts {
  // The steps, warm-up included; the first `warmup_steps` are left out of every rule.
  std::vector<StepRecord> steps;
  int64_t warmup_steps = 0;

  // Configuration.
  std::string device = "cpu";     ///< "cpu", "cuda:0", …
  std::string precision = "fp32";  ///< fp32, tf32, bf16, fp16
  int64_t batch_size = 0;
  int64_t accumulate = 1;
  int64_t recompute_segments = 0;
  int workers = 0;                 ///< input-pipeline threads (0: in the training thread)
  /// false: the step is known only as data wait and the rest (an --exec program), so the rest
  /// is the program's compute, not unmeasured time.
  bool phases_split = true;
  /// CPU cores each input worker process used over the run (an --exec program's DataLoader
  /// workers, from /proc); empty: not measured.
  std::vector<double> input_worker_cores;
  /// The most input workers a tune measured (its input stage); -1: none measured. More workers
  /// than this are only worth asking for when this is not above `workers`.
  int workers_measured = -1;
  bool pinned_memory = false;      ///< batch buffers page-locked (matters on a GPU)
  /// The attention kernel a transformer's training ran ("flash", "math", …); empty: none.
  std::string attention_kernel;

  // Device and host.
  bool gpu_present = false;        ///< a usable GPU was found, whichever device ran
  bool bf16_fast = false;          ///< the device runs bf16 autocast at tensor-core speed
  bool fp16_fast = false;
  int cores_usable = 0;            ///< CPU cores this process may use; 0 unknown
  int intra_op_threads = 0;        ///< 0 unknown
  std::string blas;                ///< "MKL", "OpenBLAS", "reference", …; empty unknown
  double gemm_gflops = -1;         ///< measured fp32 GEMM rate; -1 unknown
  int64_t memory_limit_bytes = 0;  ///< the device memory budget; 0 unknown
  int64_t peak_memory_bytes = 0;   ///< the run's peak device memory; 0 unknown
  /// Measured cost of one minor page fault on this host (measure_page_fault_cost); -1 unknown.
  /// With StepRecord::page_faults it prices the fresh memory each step touches.
  double page_fault_us = -1;
  bool cpu_cache = true;           ///< saturate's caching CPU allocator is on (SATURATE_CPU_CACHE)

  // Device samples (SampleSummary).
  double gpu_util_pct = -1;        ///< mean GPU duty cycle; -1 unknown
  double cpu_util_pct = -1;        ///< mean over all cores; -1 unknown
  std::vector<std::string> throttle_reasons;  ///< NVML reasons seen ("thermal", "power_cap", …)

  // Multi-process runs: each rank's median step time (ms); empty for one process. Ranks step
  // in lockstep, so a profile gives each rank's busy time (its step less its wait for the
  // gradient all-reduce) here, and that wait in rank_communication_ms.
  std::vector<double> rank_step_ms;
  /// Each rank's mean wait for the all-reduce per step (ms). The slowest rank's (the least)
  /// is the communication itself; the others' surplus is waiting for that rank.
  std::vector<double> rank_communication_ms;
  /// Pipeline runs: each stage's forward and backward compute per step (ms), in stage order;
  /// empty without stages. Every stage waits for the slowest.
  std::vector<double> stage_compute_ms;

  // Statistical efficiency: the gradient noise scale the run measured (steps == 0: none), which
  // kind ("raw", or "AdamW-preconditioned" for AdamW runs where that one is resolved), and the
  // batch it is judged against: samples per optimizer step over all ranks (0: batch_size).
  NoiseScaleEstimate noise;
  std::string noise_kind = "raw";
  int64_t global_batch = 0;
};

/// The thresholds of the rules, each with where it comes from. Tests and users may change them.
struct DiagnoseThresholds {
  /// Data wait above this share of the step: the input pipeline holds training back. 5% is the
  /// published rule of the TensorBoard profiler's input-pipeline analysis (warning); at 20% the
  /// device idles a fifth of the time (critical).
  double input_bound_pct = 5.0;
  double input_bound_critical_pct = 20.0;
  /// GPU duty cycle below this: the batch is too small to fill the device (HTA/TensorBoard
  /// profiler "GPU busy < 50%").
  double low_gpu_util_pct = 50.0;
  /// On a CPU, a step under this many ms is dominated by per-step overhead (op dispatch,
  /// optimizer loop); a larger batch amortises it. 5 ms is ~10x LibTorch's per-op dispatch cost
  /// times the few hundred ops of a small model's step.
  double tiny_step_ms = 5.0;
  /// Peak memory above this share of the limit: the next larger input or a fragmentation spike
  /// OOMs (the 90% rule of the anchors' memory-saving advice).
  double memory_near_limit_pct = 90.0;
  /// Host→device copy above this share of the step: copies are not overlapped with compute.
  double copy_share_pct = 5.0;
  /// Optimizer step above this share: a fused/foreach optimizer or fewer parameter tensors
  /// would help (a plain SGD/Adam step is a few % of a forward+backward).
  double optimizer_share_pct = 25.0;
  /// Unattributed time above this share: host work outside the phases (logging, .item() syncs).
  double other_share_pct = 10.0;
  /// Communication above this share: accumulate more micro-batches per all-reduce (the
  /// anchors' 10% rule).
  double communication_share_pct = 10.0;
  /// Measured GEMM rate below this (GFLOP/s per usable core): a reference BLAS. OpenBLAS/MKL
  /// reach ~50–100 per AVX2 core; Debian's reference BLAS ~3–5 in total.
  double slow_gemm_gflops_per_core = 10.0;
  /// Page faults costing more than this share of the step: the allocator hands memory back to
  /// the system and faults it in again every step. 5% like the input-pipeline rule: past it a
  /// caching allocator (or a malloc that keeps freed memory) is worth more than most tuning.
  double allocation_churn_pct = 5.0;
  /// Slowest rank's median step more than this much above the fastest: the others wait for it.
  double rank_skew_pct = 10.0;
  /// Slowest pipeline stage's compute more than this much above the fastest's: the others idle
  /// for the difference every micro-batch (torchgpipe balances to within a layer's time).
  double stage_imbalance_pct = 20.0;
  /// A batch more than this many times the noise scale's upper bound is far above the critical
  /// batch (at 4×, steps need 5× the fewest samples: 80% add little); below its lower bound
  /// divided by this, far below it (5× the fewest steps). McCandlish et al. 2018: S = S_min(1 +
  /// φ/B), E = E_min(1 + B/φ).
  double critical_batch_factor = 4.0;
};

/// Every rule that fires, most severe first. Never throws; rules without the facts they need
/// stay quiet.
std::vector<Finding> diagnose(const RunFacts& facts, const DiagnoseThresholds& thresholds = {});

/// The environment rules alone (reference BLAS, threads below cores, GPU present but unused),
/// for `saturate doctor`: they need no steps.
std::vector<Finding> diagnose_environment(const RunFacts& facts,
                                          const DiagnoseThresholds& thresholds = {});

/// The pipeline rule alone (`stage-imbalance`), for a train run's stages.
std::vector<Finding> diagnose_stages(const RunFacts& facts,
                                     const DiagnoseThresholds& thresholds = {});

/// "info" | "warning" | "critical".
std::string to_string(Severity s);

/// [{"rule", "severity", "title", "evidence": [{"name", "value", "unit"}], "recommendation"}],
/// as profile --json, plan.json and reports carry them.
nlohmann::json findings_to_json(const std::vector<Finding>& findings);
/// The inverse. Throws saturate::Error "<where>: ..." naming the field that is missing or of the
/// wrong type.
std::vector<Finding> findings_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace saturate
