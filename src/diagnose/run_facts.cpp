// SPDX-License-Identifier: Apache-2.0
#include "saturate/diagnose/run_facts.h"

#include <algorithm>

namespace saturate {

RunFacts environment_facts(const DeviceProbe& probe, const c10::Device& device, int threads,
                           double gemm_gflops) {
  RunFacts f;
  f.device = device.str();
  f.gpu_present = probe.cuda_available && !probe.gpus.empty();
  if (device.is_cuda()) {
    const auto index = static_cast<size_t>(device.has_index() ? device.index() : 0);
    if (index < probe.gpus.size()) {
      const CudaDeviceInfo& gpu = probe.gpus[index];
      f.bf16_fast = gpu.has_bf16;
      f.fp16_fast = gpu.cc_major >= 7;  // tensor cores from Volta on
      f.memory_limit_bytes = gpu.mem_total_bytes;
    }
    f.pinned_memory = true;  // the loader pins its buffers for a GPU
  } else {
    f.bf16_fast = probe.cpu.has_bf16;
  }
  f.cores_usable = probe.cpu.cores_usable;
  f.intra_op_threads = threads;
  f.blas = probe.blas.name;
  f.gemm_gflops = gemm_gflops;
  return f;
}

RunFacts profile_facts(const Profile& p) {
  RunFacts facts = environment_facts(p.probe, p.device, p.threads * p.local_ranks,
                                     p.gemm_peak_flops > 0 ? p.gemm_peak_flops / 1e9 : -1.0);
  facts.steps = p.records;
  facts.phases_split = p.phases_split;
  facts.input_worker_cores = p.input_worker_cores;
  facts.warmup_steps = p.train.timing_warmup_steps;
  facts.precision = to_string(p.train.precision);
  facts.batch_size = p.train.batch_size;
  facts.accumulate = p.train.accumulate;
  facts.recompute_segments = p.train.recompute_segments;
  facts.workers = p.workers;
  if (p.memory_limit_bytes > 0) facts.memory_limit_bytes = p.memory_limit_bytes;
  facts.peak_memory_bytes = p.peak_memory_bytes;
  facts.attention_kernel = p.attention_kernel;
  facts.gpu_util_pct = p.device_samples.gpu_util_pct;
  facts.cpu_util_pct = p.device_samples.cpu_util_pct;
  facts.throttle_reasons = p.device_samples.throttle_reasons;
  if (p.ranks.size() > 1) {
    for (const RankTimes& r : p.ranks) {
      facts.rank_step_ms.push_back(r.busy_ms);
      facts.rank_communication_ms.push_back(r.communication_ms);
    }
  }
  facts.page_fault_us = p.page_fault_cost.faults > 0 ? p.page_fault_cost.us_per_fault : -1.0;
  facts.cpu_cache = p.cpu_cache;
  const bool adam = p.train.optimizer == OptimizerKind::kAdamW;
  facts.noise = adam && p.noise_precond.is_resolved() ? p.noise_precond : p.noise;
  facts.noise_kind = adam && p.noise_precond.is_resolved() ? "AdamW-preconditioned" : "raw";
  facts.global_batch = p.train.batch_size * std::max<int64_t>(1, p.world_size());
  return facts;
}

}  // namespace saturate
