// SPDX-License-Identifier: Apache-2.0
#include "saturate/distributed/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "saturate/core/error.h"
#include "saturate/core/log.h"
#include "saturate/core/program_path.h"
#include "saturate/core/strings.h"
#include "saturate/core/temp_folder.h"
#include "saturate/device/threads.h"

extern char** environ;

namespace saturate {
namespace {

using Clock = std::chrono::steady_clock;

// The signal the launcher received last (0: none); the handler also wakes poll() through a pipe.
volatile sig_atomic_t g_received = 0;
int g_wake_fd = -1;

void on_signal(int sig) {
  g_received = sig;
  if (g_wake_fd >= 0) {
    const char c = 1;
    [[maybe_unused]] const ssize_t n = write(g_wake_fd, &c, 1);
  }
}

// Installs the forwarding handlers for the launch and puts the previous ones back after it.
class SignalForwarding {
 public:
  explicit SignalForwarding(int wake_fd) {
    g_received = 0;
    g_wake_fd = wake_fd;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalForwarding() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &old_[i], nullptr);
    g_wake_fd = -1;
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_{};
};

std::string signal_name(int sig) {
  switch (sig) {
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGPIPE: return "SIGPIPE";
    default: return "signal " + std::to_string(sig);
  }
}

// The variables launch() sets; a copy of any of them in the launcher's own environment (it may
// itself run under torchrun or srun) is dropped first.
bool is_launcher_variable(const std::string& entry) {
  static const char* const kNames[] = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
      "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
      "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
      "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE"};
  for (const char* name : kNames) {
    const size_t n = std::strlen(name);
    if (entry.size() > n && entry.compare(0, n, name) == 0 && entry[n] == '=') return true;
  }
  return false;
}

// One of a rank's output pipes (read end, non-blocking) and the line it has not ended yet.
struct Stream {
  int fd = -1;
  std::string partial;
};

struct Rank {
  int global = 0;
  int local = 0;
  pid_t pid = -1;
  std::string prefix;  // "[rank N] ", or "" without --prefix
  Stream out, err;
  std::string last_err_line;
  std::string error_file;
  bool running = false;
  int status = 0;
};

// "[rank N] " before each complete line of `chunk`; a partial line waits for the rest.
void relay(std::string& partial, const char* data, size_t n, const std::string& prefix,
           std::ostream& os, std::string* last_line) {
  partial.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = partial.substr(start, nl - start);
    os << prefix << line << '\n';
    if (last_line != nullptr && !line.empty()) *last_line = line;
  }
  partial.erase(0, start);
  os.flush();
}

void flush_partial(std::string& partial, const std::string& prefix, std::ostream& os,
                   std::string* last_line) {
  if (partial.empty()) return;
  os << prefix << partial << '\n';
  if (last_line != nullptr) *last_line = partial;
  partial.clear();
  os.flush();
}

// Relays what `s` holds now, line by line (`drain`: until nothing is left; else one read, so a
// rank that writes without pause cannot hold up the others); at end of file the unended line
// too, and the pipe is closed. `last_line`, when given, keeps the last line (a rank's stderr).
void pump(Stream& s, const std::string& prefix, std::ostream& os, std::string* last_line,
          bool drain) {
  char buf[65536];
  do {
    const ssize_t n = read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      relay(s.partial, buf, static_cast<size_t>(n), prefix, os, last_line);
      continue;
    }
    if (n < 0 && errno == EAGAIN) return;  // nothing more for now
    if (n < 0 && errno == EINTR) continue;
    flush_partial(s.partial, prefix, os, last_line);
    close(s.fd);
    s.fd = -1;
    return;
  } while (drain);
}

// The message a rank left in its TORCHELASTIC_ERROR_FILE (torchrun's layout), "" when none.
std::string error_file_message(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    const auto& m = j.at("message");
    return first_line(m.is_string() ? m.get<std::string>() : m.at("message").get<std::string>());
  } catch (const std::exception&) {
    return "";
  }
}

std::string describe_end(const Rank& r) {
  std::string how;
  if (WIFSIGNALED(r.status)) {
    how = "killed by " + signal_name(WTERMSIG(r.status));
  } else {
    how = "exited with code " + std::to_string(WEXITSTATUS(r.status));
  }
  // What it said: its error file, else (when it exited rather than being killed) its last line
  // on stderr, which for most programs is the error.
  std::string why = error_file_message(r.error_file);
  if (why.empty() && WIFEXITED(r.status)) why = r.last_err_line;
  return why.empty() ? how : how + ": " + why;
}

bool failed(const Rank& r) {
  return WIFSIGNALED(r.status) || (WIFEXITED(r.status) && WEXITSTATUS(r.status) != 0);
}

void signal_ranks(std::vector<Rank>& ranks, int sig) {
  for (Rank& r : ranks)
    if (r.running) kill(-r.pid, sig);  // its process group: the rank and what it started
}

void check_options(const LaunchOptions& o) {
  SATURATE_CHECK(o.nproc_per_node >= 1, "launch: --nproc-per-node must be >= 1, got ",
                 o.nproc_per_node);
  SATURATE_CHECK(o.nnodes >= 1, "launch: --nnodes must be >= 1, got ", o.nnodes);
  SATURATE_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "launch: --node-rank must be in [0, ",
                 o.nnodes, "), got ", o.node_rank);
  SATURATE_CHECK(o.master_port >= 0 && o.master_port <= 65535,
                 "launch: --master-port must be in [1, 65535], got ", o.master_port);
  SATURATE_CHECK(o.nnodes == 1 || o.master_port > 0,
                 "launch: --master-port is needed with --nnodes ", o.nnodes,
                 " (every node must name the same port)");
  SATURATE_CHECK(o.nnodes == 1 || !o.master_addr.empty(),
                 "launch: --master-addr is needed with --nnodes ", o.nnodes,
                 " (the address of node 0, where rank 0 hosts the store)");
  SATURATE_CHECK(std::isfinite(o.grace_s) && o.grace_s >= 0,
                 "launch: --grace must be a number of seconds >= 0, got ", o.grace_s);
  SATURATE_CHECK(!o.command.empty(), "launch: no command to run: give it after '--', e.g. "
                                     "saturate launch --nproc-per-node 2 -- train --steps 100");
}

// The launcher's own environment less its launcher variables; OMP_NUM_THREADS set, as torchrun
// does, so that one node's ranks share its cores instead of each taking all of them
// (saturate's own commands set their threads the same way; see configure_threads).
std::vector<std::string> base_environment(int nproc_per_node) {
  std::vector<std::string> env;
  bool has_omp = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (is_launcher_variable(entry)) continue;
    has_omp = has_omp || entry.rfind("OMP_NUM_THREADS=", 0) == 0;
    env.push_back(entry);
  }
  if (!has_omp)
    env.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1, usable_cores() / nproc_per_node)));
  return env;
}

// What the ranks share of torchrun's variables.
struct JobVariables {
  int world = 1;
  std::string addr;
  int port = 0;
  std::string run_id;
};

// `base` with torchrun's variables for rank `r`.
std::vector<std::string> rank_environment(std::vector<std::string> env, const LaunchOptions& o,
                                          const Rank& r, const JobVariables& job) {
  const std::pair<const char*, std::string> vars[] = {
      {"RANK", std::to_string(r.global)},
      {"WORLD_SIZE", std::to_string(job.world)},
      {"LOCAL_RANK", std::to_string(r.local)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
      {"ROLE_RANK", std::to_string(r.global)},
      {"ROLE_WORLD_SIZE", std::to_string(job.world)},
      {"ROLE_NAME", "default"},
      {"MASTER_ADDR", job.addr},
      {"MASTER_PORT", std::to_string(job.port)},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"TORCHELASTIC_RUN_ID", job.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", r.error_file}};
  for (const auto& [name, value] : vars) env.push_back(std::string(name) + "=" + value);
  return env;
}

// Forks and execs one rank with `envs` as its environment; its stdout and stderr come back
// through non-blocking pipes. Everything the child needs is built before the fork: after it
// only async-signal-safe calls.
void start_rank(Rank& r, const std::string& program, std::vector<char*>& argv,
                std::vector<std::string>& env, pid_t launcher, int devnull) {
  int po[2], pe[2];
  SATURATE_CHECK(pipe2(po, O_CLOEXEC) == 0 && pipe2(pe, O_CLOEXEC) == 0, "launch: pipe: ",
                 std::strerror(errno));
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  SATURATE_CHECK(pid >= 0, "launch: fork: ", std::strerror(errno));
  if (pid == 0) {
    // The child: its own process group (a terminal's Ctrl-C reaches only the launcher, which
    // forwards it once), killed if the launcher dies, default SIGPIPE for the program.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(po[1], 1);
    dup2(pe[1], 2);
    execve(program.c_str(), argv.data(), envp.data());
    const char msg[] = "saturate: error: launch: exec failed\n";
    [[maybe_unused]] const ssize_t n = write(2, msg, sizeof(msg) - 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so no signal can find the child still in ours
  close(po[1]);
  close(pe[1]);
  r.pid = pid;
  r.out.fd = po[0];
  r.err.fd = pe[0];
  for (int fd : {po[0], pe[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  r.running = true;
}

// The running ranks of one launch: relays their output and watches for the end of each until
// all have ended and said all; stops the others after the first failure and passes signals on.
class RankWatch {
 public:
  RankWatch(std::vector<Rank>& ranks, const LaunchOptions& o, int wake_fd, std::ostream& out,
            std::ostream& err, LaunchResult& result)
      : ranks_(ranks), o_(o), wake_fd_(wake_fd), out_(out), err_(err), result_(result) {}

  // Returns the signal passed on to the ranks (0: none).
  int run() {
    for (;;) {
      const bool any_running =
          std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
      if (!relay_output(any_running)) break;
      reap();
      pass_on_signal();
      enforce_deadlines(any_running);
    }
    return forwarded_;
  }

 private:
  // One poll of every open pipe (and the wake pipe); false when no rank runs and no pipe is
  // left.
  bool relay_output(bool any_running) {
    std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}};
    std::vector<std::pair<Rank*, bool>> owners = {{nullptr, false}};  // the rank, is stderr
    for (Rank& r : ranks_) {
      if (r.out.fd >= 0) fds.push_back({r.out.fd, POLLIN, 0}), owners.push_back({&r, false});
      if (r.err.fd >= 0) fds.push_back({r.err.fd, POLLIN, 0}), owners.push_back({&r, true});
    }
    if (!any_running && fds.size() == 1) return false;
    poll(fds.data(), fds.size(), 50);
    char sink[256];
    if (fds[0].revents & POLLIN) while (read(wake_fd_, sink, sizeof(sink)) > 0) {}
    for (size_t k = 1; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& r = *owners[k].first;
      if (owners[k].second) pump(r.err, r.prefix, err_, &r.last_err_line, /*drain=*/false);
      else pump(r.out, r.prefix, out_, nullptr, /*drain=*/false);
    }
    return true;
  }

  void reap() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      if (waitpid(r.pid, &r.status, WNOHANG) != r.pid) continue;
      r.running = false;
      if (failed(r) && result_.failed_rank < 0 && forwarded_ == 0) first_failure(r);
    }
  }

  // The first failure: what the job reports. The others are stopped (they would fail in their
  // next collective anyway, after a timeout if the rank hangs rather than exits). Output the
  // rank wrote just before it ended is read first, so its last line is known.
  void first_failure(Rank& r) {
    if (r.err.fd >= 0) pump(r.err, r.prefix, err_, &r.last_err_line, /*drain=*/true);
    if (r.out.fd >= 0) pump(r.out, r.prefix, out_, nullptr, /*drain=*/true);
    if (!r.err.partial.empty()) r.last_err_line = r.err.partial;
    result_.failed_rank = r.global;
    result_.reason = describe_end(r);
    result_.exit_code = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 1;
    const long others =
        std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& x) { return x.running; });
    if (o_.warn_on_failure)
      SATURATE_LOG_WARN("launch: rank ", r.global, " (local ", r.local, ", pid ", r.pid,
                        ") failed: ", result_.reason,
                        others > 0 ? "; stopping the other " + std::to_string(others) +
                                         " rank(s) on this node"
                                   : std::string());
    signal_ranks(ranks_, SIGTERM);
    kill_at_ = grace_deadline();
  }

  void pass_on_signal() {
    if (g_received == 0) return;
    const int sig = g_received;
    g_received = 0;
    SATURATE_LOG_WARN("launch: ", signal_name(sig), " received; passing it to the ranks");
    signal_ranks(ranks_, sig);
    forwarded_ = sig;
    // Ctrl-C asks the ranks to stop when they can (saturate's after their step, with a
    // summary): no deadline; a second Ctrl-C is passed on too. SIGTERM/SIGHUP get the grace.
    if (!kill_at_ && sig != SIGINT) kill_at_ = grace_deadline();
  }

  void enforce_deadlines(bool any_running) {
    if (kill_at_ && Clock::now() >= *kill_at_) {
      for (const Rank& r : ranks_)
        if (r.running)
          SATURATE_LOG_WARN("launch: rank ", r.global, " still runs ", o_.grace_s,
                            " s after SIGTERM; killing it");
      signal_ranks(ranks_, SIGKILL);
      kill_at_ = Clock::now() + std::chrono::hours(24);  // once
    }
    // A rank's own children may hold its pipes open after it ended: stop reading them soon.
    if (any_running) return;
    if (!drain_until_) drain_until_ = Clock::now() + std::chrono::seconds(2);
    if (Clock::now() < *drain_until_) return;
    for (Rank& r : ranks_)
      for (Stream* st : {&r.out, &r.err})
        if (st->fd >= 0) close(st->fd), st->fd = -1;
  }

  Clock::time_point grace_deadline() const {
    return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o_.grace_s * 1000));
  }

  std::vector<Rank>& ranks_;
  const LaunchOptions& o_;
  int wake_fd_;
  std::ostream& out_;
  std::ostream& err_;
  LaunchResult& result_;
  std::optional<Clock::time_point> kill_at_;      // SIGKILL what still runs then
  std::optional<Clock::time_point> drain_until_;  // after the last rank ended
  int forwarded_ = 0;
};

}  // namespace

int pick_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  SATURATE_CHECK(fd >= 0, "launch: cannot open a socket: ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  close(fd);
  SATURATE_CHECK(ok, "launch: cannot find a free port: ", std::strerror(err));
  return ntohs(a.sin_port);
}

LaunchResult launch(const LaunchOptions& o, std::ostream& out, std::ostream& err) {
  check_options(o);
  LaunchResult result;
  const std::string program = resolve_program(o.command[0], "launch");
  JobVariables job;
  job.addr = o.master_addr.empty() ? "127.0.0.1" : o.master_addr;
  job.port = result.master_port = o.master_port > 0 ? o.master_port : pick_free_port();
  job.world = o.nproc_per_node * o.nnodes;
  const std::vector<std::string> base_env = base_environment(o.nproc_per_node);
  job.run_id = "saturate-" + std::to_string(getpid());
  const TempFolder error_dir("saturate-launch", "launch");  // the ranks' error files

  std::vector<Rank> ranks(static_cast<size_t>(o.nproc_per_node));
  std::vector<std::vector<std::string>> envs(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    Rank& r = ranks[i];
    r.local = static_cast<int>(i);
    r.global = o.node_rank * o.nproc_per_node + r.local;
    r.prefix = o.prefix ? "[rank " + std::to_string(r.global) + "] " : "";
    r.error_file = error_dir.file("rank" + std::to_string(r.global) + ".json");
    envs[i] = rank_environment(base_env, o, r, job);
  }
  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int wake[2];
  SATURATE_CHECK(pipe2(wake, O_CLOEXEC | O_NONBLOCK) == 0, "launch: pipe: ", std::strerror(errno));
  SignalForwarding forwarding(wake[1]);
  const pid_t launcher = getpid();
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (size_t i = 0; i < ranks.size(); ++i)
    start_rank(ranks[i], program, argv, envs[i], launcher, devnull);
  if (devnull >= 0) close(devnull);
  if (!o.quiet)
    SATURATE_LOG_INFO("launch: ", o.nproc_per_node, " rank(s) on node ", o.node_rank, " of ",
                      o.nnodes, " (world ", job.world, "), store ", job.addr, ":", job.port);

  const int forwarded = RankWatch(ranks, o, wake[0], out, err, result).run();
  close(wake[0]);
  close(wake[1]);
  if (forwarded != 0 && result.failed_rank < 0) result.exit_code = 128 + forwarded;
  return result;
}

}  // namespace saturate
