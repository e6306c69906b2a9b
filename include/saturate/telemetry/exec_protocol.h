// SPDX-License-Identifier: Apache-2.0
#pragma once
// saturate's side of the exec protocol, version 1 (docs/exec-protocol.md): reading the JSON lines
// a foreign training program writes (start, step, eval, end), by the reader rules of its §5, and
// deciding how a trial of it ended (§7: out of memory, another error, or ok).
//
//   ExecMetricsReader r("metrics.jsonl", ExecTransport::kFile);
//   r.feed(bytes_read_so_far);          // whole lines are read; a fatal one throws saturate::Error
//   r.finish();                         // at exit: an unterminated last line is dropped
//   for (const ExecStep& s : r.steps()) use(s.t, s.samples);
//   ExecOutcome o = classify_exec_exit(exit_facts);   // kOk | kOom | kError, with the reason

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace saturate {

inline constexpr int kExecProtocolVersion = 1;
/// What starts a protocol line on the program's stdout when it has no metrics file.
inline constexpr std::string_view kExecStdoutPrefix = ":::SATURATE ";
/// More ignored lines than this in one trial: the program does not speak the protocol.
inline constexpr int64_t kExecMaxIgnoredLines = 10;

enum class ExecStatus { kOk, kOom, kError };
std::string to_string(ExecStatus s);  ///< "ok" | "oom" | "error"

struct ExecStart {
  int rank = 0;
  double t = 0;
  nlohmann::json applied = nlohmann::json::object();  ///< setting name → value the program uses
  std::vector<std::string> ignored;                   ///< settings passed but not applied
  std::string mode = "cooperative";                   ///< or "zero-change"
  std::string trial;
  int world_size = 1;
  int64_t pid = 0;
};

struct ExecStep {
  int rank = 0;
  double t = 0;  ///< Unix seconds, after the step's result reached the host
  int64_t step = 0;
  int64_t samples = 0;  ///< this rank's samples in the optimizer step
  double loss = std::numeric_limits<double>::quiet_NaN();  ///< NaN: not reported (or null)
  int64_t tokens = -1;                                     ///< -1: not reported
  double data_wait_s = -1;                                 ///< -1: not reported
  int64_t peak_memory_bytes = 0;                           ///< 0: not reported
};

struct ExecEval {
  int rank = 0;
  double t = 0;
  int64_t step = -1;  ///< the last step before the evaluation; -1: not reported
  std::string name;
  double value = std::numeric_limits<double>::quiet_NaN();
  bool higher_is_better = false;
};

struct ExecEnd {
  int rank = 0;
  double t = 0;
  ExecStatus status = ExecStatus::kOk;
  std::string message;
};

enum class ExecTransport {
  kFile,    ///< SATURATE_METRICS: every line is a protocol line
  kStdout,  ///< only lines that begin with kExecStdoutPrefix; the rest is the program's output
};

/// Reads a trial's protocol lines as they arrive. Fatal problems (a version it does not speak, a
/// malformed start or end, a line before start, a second start, more than kExecMaxIgnoredLines
/// ignored lines) throw saturate::Error naming `source`:line; other bad lines become warnings
/// and are ignored.
class ExecMetricsReader {
 public:
  /// `all_ranks`: SATURATE_ALL_RANKS=1 was passed, so every line must carry `rank`.
  ExecMetricsReader(std::string source, ExecTransport transport, bool all_ranks = false);

  /// Appends bytes; every complete line among them is read. Bounded: a line longer than 64 KiB
  /// without a newline is dropped (the protocol's lines are at most 4 KiB).
  void feed(std::string_view bytes);
  /// The program has exited: an unterminated last line is dropped without a warning.
  void finish();

  const std::vector<ExecStart>& starts() const { return starts_; }
  const std::vector<ExecStep>& steps() const { return steps_; }
  const std::vector<ExecEval>& evals() const { return evals_; }
  const std::vector<ExecEnd>& ends() const { return ends_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  int64_t ignored_lines() const { return ignored_; }
  /// The first end line's status (rank 0's when ranks write), if any.
  std::optional<ExecEnd> end() const;

 private:
  struct RankState {
    bool started = false, ended = false;
    int64_t last_step = std::numeric_limits<int64_t>::min();
    double last_t = -std::numeric_limits<double>::infinity();
  };
  void read_line(std::string_view line);
  void read_object(const nlohmann::json& j, const std::string& where);
  void ignore(const std::string& where, const std::string& why);

  std::string source_;
  ExecTransport transport_;
  bool all_ranks_;
  std::string pending_;
  int64_t line_number_ = 0;
  int64_t ignored_ = 0;
  std::map<int, RankState> ranks_;
  std::vector<ExecStart> starts_;
  std::vector<ExecStep> steps_;
  std::vector<ExecEval> evals_;
  std::vector<ExecEnd> ends_;
  std::vector<std::string> warnings_;
};

/// What is known when a trial's program has exited.
struct ExecExit {
  std::optional<ExecEnd> end;  ///< its end line, if it wrote one
  int exit_code = 0;           ///< when it exited (signal == 0)
  int signal = 0;              ///< the signal that ended it; 0: it exited
  bool signal_sent_by_saturate = false;  ///< a limit (wall clock, no progress) or Ctrl-C
  std::string error_file;      ///< TORCHELASTIC_ERROR_FILE's contents; empty: none
  std::string stderr_tail;     ///< the last 64 KiB of its stderr
  bool oom_kill_rose = false;  ///< cgroup v2 memory.events oom_kill rose during the trial
};

struct ExecOutcome {
  ExecStatus status = ExecStatus::kOk;
  std::string reason;  ///< one line: what said so ("end line: ...", "stderr: CUDA out of memory")
};

/// The protocol's §7 in order: the end line's oom, exit status 75, the error file's message,
/// the stderr tail, the kernel's OOM killer. Otherwise: ok only when it exited 0 (an end line
/// that says ok does not outweigh a nonzero exit); an error carries the program's own message.
ExecOutcome classify_exec_exit(const ExecExit& exit);

/// The out-of-memory pattern found in `text` (§7's table), or empty.
std::string find_oom_pattern(std::string_view text);

}  // namespace saturate
