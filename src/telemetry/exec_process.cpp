// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/exec_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "saturate/core/error.h"
#include "saturate/core/program_path.h"
#include "saturate/core/units.h"
#include "saturate/telemetry/proc_stats.h"

extern char** environ;

namespace saturate {

std::string to_string(ExecStopReason r) {
  switch (r) {
    case ExecStopReason::kNone: return "";
    case ExecStopReason::kEnoughSteps: return "enough steps";
    case ExecStopReason::kWallLimit: return "wall-clock limit";
    case ExecStopReason::kNoProgress: return "no-progress limit";
    case ExecStopReason::kMemoryLimit: return "memory limit";
    case ExecStopReason::kInterrupted: return "interrupted";
  }
  return "";
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kStderrTail = 64 * 1024;
constexpr const char* kComponent = "exec";

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::optional<std::string> read_small_file(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

bool write_small_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// The environment of the child: saturate's own without any SATURATE_* or name the launch
// sets, then the launch's variables.
std::vector<std::string> child_environment(const ExecLaunch& l) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = name.rfind("SATURATE_", 0) == 0;
    for (const auto& [n, v] : l.env) replaced = replaced || n == name;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [n, v] : l.env) env.push_back(n + "=" + v);
  return env;
}

// A cgroup v2 child of this process's own cgroup with memory.max set, where the system lets
// this process make one (the memory controller delegated to its cgroup); else the reason not.
struct MemoryCgroup {
  std::string path;  ///< empty: none
  std::string why_not;
  int64_t oom_kills_before = 0;
};

std::string cgroup2_mount() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    // "... mount-point options - fstype source super-options"
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream f(line.substr(0, dash));
    std::string id, parent, dev, root, mount;
    if (f >> id >> parent >> dev >> root >> mount) return mount;
  }
  return "";
}

int64_t oom_kill_count(const std::string& cgroup) {
  const auto text = read_small_file(cgroup + "/memory.events", 4096);
  if (!text) return 0;
  const size_t at = text->find("oom_kill ");
  return at == std::string::npos ? 0 : std::atoll(text->c_str() + at + 9);
}

MemoryCgroup make_memory_cgroup(int64_t limit_bytes) {
  MemoryCgroup c;
  const std::string mount = cgroup2_mount();
  if (mount.empty()) {
    c.why_not = "no cgroup v2 hierarchy is mounted";
    return c;
  }
  const auto self = read_small_file("/proc/self/cgroup", 64 * 1024);
  const size_t at = self ? self->find("0::") : std::string::npos;
  if (at == std::string::npos) {
    c.why_not = "this process has no cgroup v2 group";
    return c;
  }
  std::string own = self->substr(at + 3);
  own = own.substr(0, own.find('\n'));
  const std::string parent = mount + (own == "/" ? "" : own);
  const auto control = read_small_file(parent + "/cgroup.subtree_control", 4096);
  if (!control || control->find("memory") == std::string::npos) {
    c.why_not = "the memory controller is not delegated to " + parent;
    return c;
  }
  static std::atomic<int> serial{0};
  const std::string path = parent + "/saturate-exec-" + std::to_string(getpid()) + "-" +
                           std::to_string(serial++);
  if (::mkdir(path.c_str(), 0755) != 0) {
    c.why_not = "cannot make " + path + ": " + std::strerror(errno);
    return c;
  }
  if (!write_small_file(path + "/memory.max", std::to_string(limit_bytes))) {
    ::rmdir(path.c_str());
    c.why_not = "cannot set memory.max in " + path;
    return c;
  }
  write_small_file(path + "/memory.swap.max", "0");  // where swap exists; best effort
  c.path = path;
  c.oom_kills_before = oom_kill_count(path);
  return c;
}

// An output pipe of the child (read end, non-blocking), copied to its log file up to
// kLogLimit bytes (a chatty program must not fill the disk).
constexpr int64_t kLogLimit = int64_t{64} << 20;
struct Pipe {
  int fd = -1;
  std::ofstream log;
  int64_t logged = 0;
  void write(const char* data, ssize_t n) {
    if (logged >= kLogLimit) return;
    const int64_t take = std::min<int64_t>(n, kLogLimit - logged);
    log.write(data, take);
    logged += take;
    if (logged >= kLogLimit) log << "\n[saturate: log truncated at 64 MiB]\n";
  }
};

}  // namespace

namespace {

// One run: the child, its pipes and lines, the group's samples and the limits.
class ExecSession {
 public:
  explicit ExecSession(const ExecLaunch& l)
      : l_(l),
        reader_(l.metrics_path.empty() ? "stdout" : l.metrics_path,
                l.metrics_path.empty() ? ExecTransport::kStdout : ExecTransport::kFile,
                l.all_ranks),
        page_bytes_(sysconf(_SC_PAGESIZE)),
        ticks_per_s_(static_cast<double>(sysconf(_SC_CLK_TCK))) {}
  ~ExecSession() {
    for (Pipe* p : {&out_, &err_})
      if (p->fd >= 0) ::close(p->fd);
    if (metrics_fd_ >= 0) ::close(metrics_fd_);
  }
  ExecSession(const ExecSession&) = delete;
  ExecSession& operator=(const ExecSession&) = delete;

  void start();
  void watch();
  // After a fatal protocol line: stop everything at once.
  void abandon() {
    stop_group(SIGKILL);
    if (!exited_) waitpid(pid_, nullptr, 0), exited_ = true;
    wait_group_gone(l_.grace_s);
    release_cgroup();
  }
  ExecRun finish();

 private:
  void start_child(const std::string& program, std::vector<std::string>& argv,
                   std::vector<std::string>& env);
  bool pump(int timeout_ms);
  void read_metrics();
  void sample();
  void sample_gpu_memory(ExecGroupSample& s);
  void enforce_limits();
  void stop_group(int sig) {
    if (pid_ > 1) ::kill(-pid_, sig);  // the child's own group (setsid), never ours
  }
  void request_stop(ExecStopReason why) {
    if (r_.stopped != ExecStopReason::kNone) return;
    r_.stopped = why;
    stop_group(why == ExecStopReason::kMemoryLimit ? SIGKILL : SIGTERM);
    term_sent_ = Clock::now();
  }
  bool group_alive() const;
  void wait_group_gone(double limit_s);
  void release_cgroup();
  ExecOutcome stop_outcome(const ExecOutcome& program) const;

  const ExecLaunch& l_;
  ExecMetricsReader reader_;
  ExecRun r_;
  MemoryCgroup cgroup_;
  Pipe out_, err_;
  int metrics_fd_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string stderr_tail_;
  Clock::time_point t0_, last_progress_, last_sample_, enough_at_, term_sent_;
  size_t steps_seen_ = 0;
  bool enough_ = false;
  std::map<int64_t, std::pair<size_t, uint64_t>> seen_;  // pid → (index in processes, ticks)
  long page_bytes_;
  double ticks_per_s_;
};

void ExecSession::start() {
  const std::string program = resolve_program(l_.argv.at(0), kComponent);
  std::vector<std::string> argv = l_.argv, env = child_environment(l_);
  if (l_.memory_limit_bytes > 0) {
    cgroup_ = make_memory_cgroup(l_.memory_limit_bytes);
    r_.memory_limit_how = cgroup_.path.empty()
                              ? "RSS watchdog (" + cgroup_.why_not + ")"
                              : "cgroup v2 memory.max (" + cgroup_.path + ")";
  }
  r_.stdout_path = l_.run_dir + "/stdout.log";
  r_.stderr_path = l_.run_dir + "/stderr.log";
  out_.log.open(r_.stdout_path, std::ios::binary | std::ios::trunc);
  err_.log.open(r_.stderr_path, std::ios::binary | std::ios::trunc);
  SATURATE_CHECK(out_.log && err_.log, kComponent, ": cannot write the logs in ", l_.run_dir);
  start_child(program, argv, env);
  t0_ = last_progress_ = last_sample_ = Clock::now();
  r_.started_unix_s = std::chrono::duration<double>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
}

// Everything the child needs is built before the fork: after it, only async-signal-safe calls.
void ExecSession::start_child(const std::string& program, std::vector<std::string>& argv,
                              std::vector<std::string>& env) {
  int po[2], pe[2];
  SATURATE_CHECK_RUN(pipe2(po, O_CLOEXEC) == 0, kComponent, ": pipe: ", std::strerror(errno));
  SATURATE_CHECK_RUN(pipe2(pe, O_CLOEXEC) == 0, kComponent, ": pipe: ", std::strerror(errno));
  std::vector<char*> args, envp;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string procs = cgroup_.path.empty() ? "" : cgroup_.path + "/cgroup.procs";
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  SATURATE_CHECK_RUN(pid >= 0, kComponent, ": fork: ", std::strerror(errno));
  if (pid == 0) {
    setsid();  // its own session and process group: signals to the group reach only it
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    if (!procs.empty()) {
      const int fd = ::open(procs.c_str(), O_WRONLY);
      if (fd < 0 || ::write(fd, "0", 1) != 1) _exit(126);
      ::close(fd);
    }
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(po[1], 1);
    dup2(pe[1], 2);
    execve(program.c_str(), args.data(), envp.data());
    const char msg[] = "saturate: error: exec: execve failed\n";
    [[maybe_unused]] const ssize_t n = ::write(2, msg, sizeof(msg) - 1);
    _exit(127);
  }
  if (devnull >= 0) ::close(devnull);
  ::close(po[1]);
  ::close(pe[1]);
  pid_ = pid;
  out_.fd = po[0];
  err_.fd = pe[0];
  for (int fd : {po[0], pe[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Reads what the pipes have (waiting at most timeout_ms); false once both are closed.
bool ExecSession::pump(int timeout_ms) {
  std::vector<pollfd> fds;
  for (Pipe* p : {&out_, &err_})
    if (p->fd >= 0) fds.push_back({p->fd, POLLIN, 0});
  if (fds.empty()) {
    if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return false;
  }
  ::poll(fds.data(), fds.size(), timeout_ms);
  char buf[65536];
  for (Pipe* p : {&out_, &err_}) {
    // Bounded: at most 16 reads (1 MiB) a pipe per call, so limits are checked in between.
    for (int i = 0; p->fd >= 0 && i < 16; ++i) {
      const ssize_t n = ::read(p->fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;  // EAGAIN: nothing more now
      if (n == 0) {
        ::close(p->fd);
        p->fd = -1;
        break;
      }
      const std::string_view bytes(buf, static_cast<size_t>(n));
      p->write(buf, n);
      if (p == &out_ && l_.metrics_path.empty()) reader_.feed(bytes);
      if (p == &err_) {
        stderr_tail_.append(bytes);
        if (stderr_tail_.size() > 2 * kStderrTail)
          stderr_tail_.erase(0, stderr_tail_.size() - kStderrTail);
      }
    }
  }
  return out_.fd >= 0 || err_.fd >= 0;
}

void ExecSession::read_metrics() {
  if (l_.metrics_path.empty()) return;
  if (metrics_fd_ < 0) metrics_fd_ = ::open(l_.metrics_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (metrics_fd_ < 0) return;  // not written yet
  char buf[65536];
  for (int i = 0; i < 16; ++i) {
    const ssize_t n = ::read(metrics_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reader_.feed(std::string_view(buf, static_cast<size_t>(n)));
  }
}

void ExecSession::sample() {
  const double now_s = seconds_since(t0_);
  const double dt = std::chrono::duration<double>(Clock::now() - last_sample_).count();
  last_sample_ = Clock::now();
  ExecGroupSample s;
  s.t = now_s;
  uint64_t ticks = 0;
  for (const PidStat& p : read_process_group(pid_)) {
    if (p.state == 'Z') continue;
    const int64_t rss = p.rss_pages * page_bytes_;
    ++s.processes;
    s.rss_bytes += rss;
    auto [it, fresh] = seen_.try_emplace(p.pid, r_.processes.size(), p.cpu_ticks);
    if (fresh) r_.processes.push_back({p.pid, p.comm, 0, 0, 0, -1});
    ExecProcessUse& use = r_.processes[it->second.first];
    const uint64_t before = fresh ? p.cpu_ticks : it->second.second;
    const uint64_t delta = p.cpu_ticks >= before ? p.cpu_ticks - before : 0;
    ticks += delta;
    use.cpu_s += static_cast<double>(delta) / ticks_per_s_;
    if (!fresh) use.seen_s += dt;
    use.name = p.comm;  // a worker renames itself after the fork
    use.peak_rss_bytes = std::max(use.peak_rss_bytes, rss);
    it->second.second = p.cpu_ticks;
  }
  s.cpu_cores = dt > 0 ? static_cast<double>(ticks) / ticks_per_s_ / dt : 0;
  if (l_.nvml != nullptr && l_.nvml->is_loaded()) sample_gpu_memory(s);
  r_.peak_rss_bytes = std::max(r_.peak_rss_bytes, s.rss_bytes);
  r_.samples.push_back(s);
  if (cgroup_.path.empty() && l_.memory_limit_bytes > 0 && s.rss_bytes > l_.memory_limit_bytes)
    request_stop(ExecStopReason::kMemoryLimit);
}

// The GPU memory NVML attributes to the group's processes.
void ExecSession::sample_gpu_memory(ExecGroupSample& s) {
  s.gpu_memory_bytes = 0;
  for (const Nvml::Process& p : l_.nvml->processes()) {
    const auto it = seen_.find(p.pid);
    if (it == seen_.end() || p.used_bytes < 0) continue;
    s.gpu_memory_bytes += p.used_bytes;
    ExecProcessUse& use = r_.processes[it->second.first];
    use.peak_gpu_memory_bytes = std::max(use.peak_gpu_memory_bytes, p.used_bytes);
  }
  r_.peak_gpu_memory_bytes = std::max(r_.peak_gpu_memory_bytes, s.gpu_memory_bytes);
}

void ExecSession::enforce_limits() {
  if (reader_.steps().size() > steps_seen_) {
    steps_seen_ = reader_.steps().size();
    last_progress_ = Clock::now();
  }
  if (exited_) return;
  if (r_.stopped != ExecStopReason::kNone) {
    // Escalate once the grace period is over.
    if (seconds_since(term_sent_) > l_.grace_s) stop_group(SIGKILL);
    return;
  }
  const double idle = seconds_since(last_progress_);
  const double allowed = steps_seen_ == 0 && l_.startup_limit_s > 0 ? l_.startup_limit_s
                                                                    : l_.no_progress_s;
  if (l_.stop != nullptr && l_.stop->load()) {
    request_stop(ExecStopReason::kInterrupted);
  } else if (l_.wall_limit_s > 0 && seconds_since(t0_) > l_.wall_limit_s) {
    request_stop(ExecStopReason::kWallLimit);
  } else if (allowed > 0 && idle > allowed) {
    request_stop(ExecStopReason::kNoProgress);
  } else if (l_.stop_after_steps > 0 &&
             static_cast<int64_t>(steps_seen_) >= l_.stop_after_steps) {
    if (!std::exchange(enough_, true)) enough_at_ = Clock::now();
    if (seconds_since(enough_at_) > l_.grace_s) request_stop(ExecStopReason::kEnoughSteps);
  }
}

void ExecSession::watch() {
  // Bounded: the limits end the child; after it exited, its pipes get at most grace_s more
  // (a grandchild may hold them open) before the group is stopped.
  std::optional<Clock::time_point> exited_at;
  for (;;) {
    const bool open = pump(50);
    read_metrics();
    if (!exited_) {
      const pid_t w = waitpid(pid_, &status_, WNOHANG);
      if (w == pid_) exited_ = true, exited_at = Clock::now();
    }
    if (std::chrono::duration<double>(Clock::now() - last_sample_).count() >=
        l_.sample_interval_s)
      sample();
    enforce_limits();
    if (exited_ && (!open || seconds_since(*exited_at) > l_.grace_s)) break;
  }
  read_metrics();
  reader_.finish();
  r_.wall_s = seconds_since(t0_);
  // Whatever of the group outlived the program (workers, grandchildren) is stopped too.
  if (group_alive()) {
    stop_group(SIGTERM);
    wait_group_gone(l_.grace_s);
    if (group_alive()) stop_group(SIGKILL), wait_group_gone(l_.grace_s);
  }
  r_.group_left_empty = !group_alive();
  while (pump(0)) {
  }
}

bool ExecSession::group_alive() const {
  for (const PidStat& p : read_process_group(pid_))
    if (p.state != 'Z') return true;
  return false;
}

void ExecSession::wait_group_gone(double limit_s) {
  const Clock::time_point t = Clock::now();
  while (group_alive() && seconds_since(t) < limit_s)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void ExecSession::release_cgroup() {
  if (cgroup_.path.empty()) return;
  // The kernel lets a cgroup go once its last process is gone: retry briefly.
  for (int i = 0; i < 50 && ::rmdir(cgroup_.path.c_str()) != 0 && errno == EBUSY; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cgroup_.path.clear();
}

// The outcome once saturate itself stopped the program.
ExecOutcome ExecSession::stop_outcome(const ExecOutcome& program) const {
  const double idle = l_.no_progress_s, startup = l_.startup_limit_s;
  switch (r_.stopped) {
    case ExecStopReason::kNone: return program;
    case ExecStopReason::kEnoughSteps:
      return program.status == ExecStatus::kOom ? program : ExecOutcome{ExecStatus::kOk, ""};
    case ExecStopReason::kMemoryLimit:
      return {ExecStatus::kOom, "resident memory of its processes " +
                                    format_bytes(r_.peak_rss_bytes) + " went over the limit of " +
                                    format_bytes(l_.memory_limit_bytes) + " (RSS watchdog)"};
    case ExecStopReason::kWallLimit:
      return {ExecStatus::kError, "stopped at the wall-clock limit of " +
                                      format_duration_s(l_.wall_limit_s)};
    case ExecStopReason::kNoProgress:
      return {ExecStatus::kError,
              steps_seen_ == 0
                  ? "no step reported within " +
                        format_duration_s(startup > 0 ? startup : idle) + " of its start"
                  : "no step reported for " + format_duration_s(idle) + " after step " +
                        std::to_string(reader_.steps().back().step) + ": stopped"};
    case ExecStopReason::kInterrupted: return {ExecStatus::kError, "interrupted"};
  }
  return program;
}

ExecRun ExecSession::finish() {
  r_.starts = reader_.starts();
  r_.steps = reader_.steps();
  r_.evals = reader_.evals();
  r_.end = reader_.end();
  r_.warnings = reader_.warnings();
  ExecExit& x = r_.exit;
  x.end = r_.end;
  if (WIFSIGNALED(status_)) x.signal = WTERMSIG(status_);
  if (WIFEXITED(status_)) x.exit_code = WEXITSTATUS(status_);
  x.signal_sent_by_saturate = r_.stopped != ExecStopReason::kNone;
  for (const auto& [name, value] : l_.env)
    if (name == "TORCHELASTIC_ERROR_FILE") x.error_file = read_small_file(value, 64 * 1024).value_or("");
  x.stderr_tail = stderr_tail_.size() > kStderrTail
                      ? stderr_tail_.substr(stderr_tail_.size() - kStderrTail)
                      : stderr_tail_;
  if (!cgroup_.path.empty()) x.oom_kill_rose = oom_kill_count(cgroup_.path) > cgroup_.oom_kills_before;
  release_cgroup();
  r_.outcome = stop_outcome(classify_exec_exit(x));
  return std::move(r_);
}

}  // namespace

ExecRun run_exec(const ExecLaunch& launch) {
  SATURATE_CHECK(!launch.argv.empty(), kComponent, ": no command to run");
  ExecSession session(launch);
  session.start();
  try {
    session.watch();
  } catch (...) {
    session.abandon();
    throw;
  }
  return session.finish();
}

}  // namespace saturate
