// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/proc_stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

namespace saturate {
namespace {

CpuTimes parse_cpu_fields(std::istringstream& in) {
  // user nice system idle iowait irq softirq steal guest guest_nice; older kernels print fewer.
  // guest and guest_nice are already counted in user and nice, so they are left out of total.
  uint64_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint64_t& x : v) {
    if (!(in >> x)) {
      x = 0;
      break;
    }
  }
  CpuTimes t;
  t.idle = v[3] + v[4];
  for (uint64_t x : v) t.total += x;
  return t;
}

// /proc files report size 0, so read until EOF rather than by stat size.
std::optional<std::string> read_whole_file(const char* path) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

ProcStat parse_proc_stat(const std::string& text) {
  ProcStat stat;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.compare(0, 3, "cpu") != 0) continue;
    std::istringstream in(line);
    std::string label;
    in >> label;
    if (label == "cpu") {
      stat.all = parse_cpu_fields(in);
    } else if (label.size() > 3 && label.find_first_not_of("0123456789", 3) == std::string::npos) {
      stat.cores.push_back(parse_cpu_fields(in));
    }
  }
  return stat;
}

double cpu_util_pct(const CpuTimes& before, const CpuTimes& after) {
  if (after.total <= before.total || after.idle < before.idle) return 0.0;
  const double total = static_cast<double>(after.total - before.total);
  const double idle = static_cast<double>(after.idle - before.idle);
  if (idle >= total) return 0.0;
  return 100.0 * (total - idle) / total;
}

CpuSample cpu_util_between(const ProcStat& before, const ProcStat& after) {
  CpuSample cpu;
  cpu.util_pct = cpu_util_pct(before.all, after.all);
  const size_t n = std::min(before.cores.size(), after.cores.size());
  cpu.per_core_util_pct.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    cpu.per_core_util_pct.push_back(cpu_util_pct(before.cores[i], after.cores[i]));
  }
  return cpu;
}

std::optional<int64_t> parse_vm_rss_bytes(const std::string& status_text) {
  std::istringstream lines(status_text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.compare(0, 6, "VmRSS:") != 0) continue;
    std::istringstream in(line.substr(6));
    int64_t value = 0;
    std::string unit;
    if (!(in >> value) || value < 0) return std::nullopt;
    in >> unit;
    // The kernel always prints kB (meaning KiB); accept a bare number as bytes.
    if (unit == "kB" || unit == "KB" || unit == "kb") return value * 1024;
    if (unit.empty()) return value;
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<PidStat> parse_pid_stat(const std::string& text) {
  // "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
  // stime cutime cstime priority nice threads itrealvalue starttime vsize rss ..."
  const size_t open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  PidStat s;
  s.comm = text.substr(open + 1, close - open - 1);
  std::istringstream head(text.substr(0, open));
  if (!(head >> s.pid)) return std::nullopt;
  std::istringstream in(text.substr(close + 1));
  std::vector<std::string> f;
  for (std::string word; f.size() < 22 && in >> word;) f.push_back(word);
  if (f.size() < 22 || f[0].size() != 1) return std::nullopt;
  try {
    s.state = f[0][0];
    s.ppid = std::stoll(f[1]);
    s.pgrp = std::stoll(f[2]);
    s.cpu_ticks = std::stoull(f[11]) + std::stoull(f[12]);
    s.rss_pages = std::stoll(f[21]);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return s;
}

std::vector<PidStat> read_process_group(int64_t pgrp) {
  std::vector<PidStat> found;
  DIR* dir = opendir("/proc");
  if (dir == nullptr || pgrp <= 0) {
    if (dir != nullptr) closedir(dir);
    return found;
  }
  // Bounded: a host has at most a few hundred thousand PIDs, and /proc lists each once.
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    const std::optional<std::string> text =
        read_whole_file((std::string("/proc/") + e->d_name + "/stat").c_str());
    if (!text) continue;  // it ended between readdir and the read
    if (const std::optional<PidStat> s = parse_pid_stat(*text); s && s->pgrp == pgrp)
      found.push_back(*s);
  }
  closedir(dir);
  return found;
}

std::optional<PidStat> read_pid_stat(int64_t pid) {
  if (pid <= 0) return std::nullopt;
  const std::optional<std::string> text =
      read_whole_file(("/proc/" + std::to_string(pid) + "/stat").c_str());
  return text ? parse_pid_stat(*text) : std::nullopt;
}

ProcStat read_proc_stat() {
  std::optional<std::string> text = read_whole_file("/proc/stat");
  return text ? parse_proc_stat(*text) : ProcStat{};
}

int64_t read_process_rss_bytes() {
  std::optional<std::string> text = read_whole_file("/proc/self/status");
  if (!text) return 0;
  return parse_vm_rss_bytes(*text).value_or(0);
}

}  // namespace saturate
