// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host CPU and process memory from Linux /proc: pure parsers that take the file text (tested on
// fixed strings) plus thin readers of the live files.
//
//   ProcStat before = read_proc_stat(); ...; ProcStat after = read_proc_stat();
//   CpuSample cpu = cpu_util_between(before, after);
//   cpu.process_rss_bytes = read_process_rss_bytes();

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "saturate/telemetry/device_sample.h"

namespace saturate {

/// Cumulative jiffies of one CPU line of /proc/stat. idle counts idle + iowait; total counts
/// user..steal (guest time is already inside user/nice and is not added twice).
struct CpuTimes {
  uint64_t idle = 0;
  uint64_t total = 0;
};

/// One reading of /proc/stat: the aggregate "cpu" line and the "cpuN" lines in file order.
struct ProcStat {
  CpuTimes all;
  std::vector<CpuTimes> cores;
};

/// Parses /proc/stat text. Lines other than cpu lines are ignored; a malformed cpu line counts as
/// zeros. Text with no cpu lines gives an empty ProcStat.
ProcStat parse_proc_stat(const std::string& text);

/// Busy share (0..100) of the jiffies between two readings of one CPU; 0 when no time passed or
/// the counters went backwards.
double cpu_util_pct(const CpuTimes& before, const CpuTimes& after);

/// Aggregate and per-core utilisation between two readings (process_rss_bytes left 0). Per-core
/// values cover the cores present in both readings.
CpuSample cpu_util_between(const ProcStat& before, const ProcStat& after);

/// VmRSS of /proc/<pid>/status text, in bytes; nullopt when the line is absent or malformed.
std::optional<int64_t> parse_vm_rss_bytes(const std::string& status_text);

/// One process's /proc/<pid>/stat line: what a process-tree sampler needs.
struct PidStat {
  int64_t pid = 0, ppid = 0, pgrp = 0;
  std::string comm;         ///< the name between the parentheses (it may hold spaces and ')')
  char state = '?';         ///< R, S, D, Z, ...
  uint64_t cpu_ticks = 0;   ///< utime + stime, in clock ticks (sysconf(_SC_CLK_TCK) a second)
  int64_t rss_pages = 0;
};

/// Parses one /proc/<pid>/stat text; nullopt when it is malformed.
std::optional<PidStat> parse_pid_stat(const std::string& text);

/// Every process whose process group is `pgrp` now, read from /proc (zombies included); empty
/// when there is none or no /proc.
std::vector<PidStat> read_process_group(int64_t pgrp);

/// /proc/<pid>/stat of one process; nullopt when there is no such process (or no /proc).
std::optional<PidStat> read_pid_stat(int64_t pid);

/// Reads /proc/stat; an empty ProcStat when it cannot be read (not Linux, no /proc).
ProcStat read_proc_stat();

/// Resident set size of this process from /proc/self/status; 0 when it cannot be read.
int64_t read_process_rss_bytes();

}  // namespace saturate
