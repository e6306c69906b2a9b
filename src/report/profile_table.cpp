// SPDX-License-Identifier: Apache-2.0
// The table reporter of a Profile (the declarations are in profile_report.h).
#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>

#include "report/profile_phases.h"
#include "saturate/core/strings.h"
#include "saturate/core/units.h"
#include "saturate/report/findings_table.h"
#include "saturate/report/profile_report.h"
#include "saturate/report/train_report.h"

namespace saturate {
namespace {

// `text` right-aligned in `width` columns (never cut).
std::string right(std::string text, size_t width) {
  text.insert(0, text.size() < width ? width - text.size() : 0, ' ');
  return text;
}

void write_phases(std::ostream& out, const Profile& p) {
  const PhaseBreakdown& ph = p.phases;
  out << "  phase                     ms   share\n";
  for (const auto& phase : detail::named_phases(ph)) {
    if (std::string(phase.name) == "communication" && p.ranks.size() <= 1) continue;
    const bool kept = std::string(phase.name) == "data_wait" || std::string(phase.name) == "other";
    if (!p.phases_split && !kept) continue;
    std::string name = !p.phases_split && std::string(phase.name) == "other" ? "rest of step"
                                                                              : phase.name;
    name.resize(16, ' ');
    const double share = ph.step_ms > 0 ? 100.0 * phase.ms / ph.step_ms : 0.0;
    out << "    " << name << right(format_fixed(phase.ms, 2), 8) << " "
        << right(format_fixed(share, 1) + "%", 7) << "\n";
  }
}

// Data parallel: each rank's busy, communication and data time against the fastest rank's.
// The slowest rank is the one that waits least: the others wait for it.
void write_ranks(std::ostream& out, const Profile& p) {
  double fastest = p.ranks[0].busy_ms;
  for (const RankTimes& r : p.ranks) fastest = std::min(fastest, r.busy_ms);
  out << "  ranks (" << p.ranks.size() << ", global batch " << p.train.batch_size * p.world_size()
      << ")  busy ms   comm ms   data ms   vs fastest\n";
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const RankTimes& t = p.ranks[r];
    std::string head = "    rank " + std::to_string(r);
    head.resize(20, ' ');
    out << head << right(format_fixed(t.busy_ms, 2), 10)
        << right(format_fixed(t.communication_ms, 2), 10)
        << right(format_fixed(t.data_wait_ms, 2), 10) << "   +"
        << format_fixed(100.0 * (t.busy_ms / fastest - 1.0), 1) << "%\n";
  }
  out << "  job           " << format_fixed(p.job_samples_per_s(), 1) << " samples/s ("
      << p.ranks.size() << " ranks × rank 0's)";
  if (p.one_process_samples_per_s > 0)
    out << "; one process alone " << format_fixed(p.one_process_samples_per_s, 1)
        << " samples/s: scaling efficiency "
        << format_fixed(100.0 * p.job_samples_per_s() /
                            (static_cast<double>(p.world_size()) * p.one_process_samples_per_s),
                        1)
        << "%";
  else if (!p.one_process_why.empty())
    out << "; one process alone: " << p.one_process_why;
  out << "\n";
}

void write_compute(std::ostream& out, const Profile& p) {
  out << "  compute       " << format_fixed(p.train_flops_per_sample / 1e6, 1)
      << " MFLOP/sample (3x forward";
  if (p.tokens_per_sample > 0)
    out << "; " << format_fixed(p.train_flops_per_sample / static_cast<double>(p.tokens_per_sample) / 1e6, 2)
        << " MFLOP/token by PaLM's 6N + 12·L·H·Q·T";
  out << "), " << format_fixed(p.achieved_flops_per_s / 1e9, 1) << " GFLOP/s";
  if (!std::isnan(p.mfu_pct))
    out << ", " << format_fixed(p.mfu_pct, 1) << "% of the measured " << p.mfu_peak_precision
        << " GEMM peak (" << format_fixed(p.mfu_peak_flops / 1e9, 1) << " GFLOP/s)";
  out << "\n";
}

void write_page_faults(std::ostream& out, const Profile& p) {
  const double us = p.page_fault_cost.us_per_fault;
  out << "  page faults   " << format_fixed(p.page_faults_per_step, 0) << " per step";
  if (p.page_fault_cost.faults > 0)
    out << " (~" << format_fixed(p.page_faults_per_step * us / 1000.0, 2) << " ms at "
        << format_fixed(us, 2) << " us each)";
  const CpuBudgetStats& cache = p.cpu_cache_stats;
  out << "; cpu cache "
      << (p.cpu_cache ? "on: " +
                            std::to_string(cache.num_allocations - cache.num_system_allocations) +
                            " of " + std::to_string(cache.num_allocations) + " allocations reused"
                      : std::string("off (SATURATE_CPU_CACHE)"))
      << "\n";
}

void write_device_samples(std::ostream& out, const Profile& p) {
  const SampleSummary& d = p.device_samples;
  out << "  cpu           " << format_fixed(d.cpu_util_pct, 0) << "% busy (mean of " << d.count
      << " samples), process RSS peak " << format_bytes(d.process_rss_peak_bytes) << "\n";
  out << "  gpu           ";
  if (d.gpu_util_pct < 0) {
    out << p.gpu_status << "\n";
    return;
  }
  out << format_fixed(d.gpu_util_pct, 0) << "% busy";
  if (d.gpu_power_w >= 0) out << ", " << format_fixed(d.gpu_power_w, 0) << " W";
  if (d.joules_per_sample >= 0) out << ", " << format_fixed(d.joules_per_sample, 3) << " J/sample";
  for (const auto& t : d.throttle_reasons) out << ", throttled: " << t;
  out << "\n";
}

}  // namespace

void write_profile_table(std::ostream& out, const Profile& p,
                         const std::vector<Finding>& findings) {
  out << "saturate profile: " << p.model << " on " << p.data << ", " << p.device.str() << ", "
      << (p.threads > 0 ? count_of(p.threads, "thread") + ", " : std::string()) << "batch "
      << p.train.batch_size << ", "
      << to_string(p.train.precision) << "\n";
  out << "  samples/s     " << format_fixed(p.throughput.samples_per_s, 1) << " (median of "
      << p.throughput.windows << " windows of " << p.window_steps << " steps, spread "
      << format_fixed(p.throughput.spread_pct, 1) << "%)\n";
  if (p.tokens_per_sample > 0)
    out << "  tokens/s      "
        << format_fixed(p.throughput.samples_per_s * static_cast<double>(p.tokens_per_sample), 0)
        << " (" << p.tokens_per_sample << " tokens per sample"
        << (p.attention_kernel.empty() ? "" : "; attention: SDPA's " + p.attention_kernel + " kernel")
        << ")\n";
  out << "  step          " << format_fixed(p.phases.step_ms, 2) << " ms\n";
  write_phases(out, p);
  if (p.ranks.size() > 1) write_ranks(out, p);
  if (p.train_flops_per_sample > 0) write_compute(out, p);
  if (p.peak_memory_bytes > 0) out << "  peak memory   " << format_bytes(p.peak_memory_bytes) << "\n";
  if (p.page_faults_per_step >= 0) write_page_faults(out, p);
  if (p.noise.steps > 0) {
    out << "  noise scale   " << describe_noise_scale(p.noise) << "\n";
    if (p.noise_precond.steps > 0)
      out << "  noise (Adam)  " << describe_noise_scale(p.noise_precond)
          << ", preconditioned as AdamW steps\n";
  }
  for (const std::string& line : p.details) out << "  " << line << "\n";
  write_device_samples(out, p);
  print_findings(out, findings);
}

void write_loader_profile_table(std::ostream& out, const LoaderProfile& p) {
  out << "saturate profile --loader-only: " << p.data << ", batch " << p.batch_size << ", "
      << p.workers << " workers, prefetch " << p.prefetch << "\n"
      << "  samples/s     " << format_fixed(p.samples_per_s, 1) << " (" << p.batches
      << " batches in " << format_duration_s(p.wall_s) << ")\n"
      << "  cpu           " << format_fixed(p.cpu_util_pct, 0) << "% of all cores busy ("
      << p.threads << " intra-op threads)\n"
      << "  per batch     " << format_fixed(p.make_batch_ms, 2) << " ms making it (read, "
      << "transform, collate), " << format_fixed(p.wait_ms, 2) << " ms waited for\n"
      << "  cache         " << format_fixed(100.0 * p.cache_hit_rate, 1) << "% hits\n";
}

}  // namespace saturate
