// SPDX-License-Identifier: Apache-2.0
#include "saturate/telemetry/exec_protocol.h"

#include <csignal>

#include "saturate/core/error.h"
#include "saturate/core/strings.h"

namespace saturate {

namespace {

using nlohmann::json;

constexpr size_t kMaxPendingBytes = 64 * 1024;

// A line the reader does not take: why, for the warning or the fatal error.
struct BadLine {
  std::string why;
};

const json& required(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) throw BadLine{std::string("'") + key + "' is missing"};
  return *it;
}

int64_t integer(const json& j, const char* key, int64_t min) {
  const json& v = required(j, key);
  if (!v.is_number_integer() || v.get<int64_t>() < min)
    throw BadLine{std::string("'") + key + "' must be an integer" +
                  (min == 0 ? " >= 0" : "")};
  return v.get<int64_t>();
}

double number(const json& j, const char* key) {
  const json& v = required(j, key);
  if (!v.is_number()) throw BadLine{std::string("'") + key + "' must be a number"};
  return v.get<double>();
}

// A number that may be null (a non-finite value), read as NaN.
double number_or_nan(const json& j, const char* key) {
  const json& v = required(j, key);
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!v.is_number()) throw BadLine{std::string("'") + key + "' must be a number or null"};
  return v.get<double>();
}

std::string text(const json& j, const char* key) {
  const json& v = required(j, key);
  if (!v.is_string()) throw BadLine{std::string("'") + key + "' must be a string"};
  return v.get<std::string>();
}

ExecStatus status_of(const std::string& s) {
  if (s == "ok") return ExecStatus::kOk;
  if (s == "oom") return ExecStatus::kOom;
  if (s == "error") return ExecStatus::kError;
  throw BadLine{"'status' must be ok, oom or error, got '" + s + "'"};
}

ExecStart parse_start(const json& j) {
  ExecStart s;
  if (j.contains("applied")) {
    if (!j["applied"].is_object()) throw BadLine{"'applied' must be an object"};
    s.applied = j["applied"];
  }
  if (j.contains("ignored")) {
    if (!j["ignored"].is_array()) throw BadLine{"'ignored' must be an array of names"};
    for (const json& n : j["ignored"]) {
      if (!n.is_string()) throw BadLine{"'ignored' must be an array of names"};
      s.ignored.push_back(n.get<std::string>());
    }
  }
  if (j.contains("mode")) s.mode = text(j, "mode");
  if (j.contains("trial")) s.trial = text(j, "trial");
  if (j.contains("world_size")) s.world_size = static_cast<int>(integer(j, "world_size", 1));
  if (j.contains("pid")) s.pid = integer(j, "pid", 0);
  return s;
}

ExecStep parse_step(const json& j) {
  ExecStep s;
  s.step = integer(j, "step", std::numeric_limits<int64_t>::min());
  s.samples = integer(j, "samples", 0);
  if (j.contains("loss")) s.loss = number_or_nan(j, "loss");
  if (j.contains("tokens")) s.tokens = integer(j, "tokens", 0);
  if (j.contains("data_wait_s")) {
    s.data_wait_s = number(j, "data_wait_s");
    if (s.data_wait_s < 0) throw BadLine{"'data_wait_s' must be >= 0"};
  }
  if (j.contains("peak_memory_bytes")) s.peak_memory_bytes = integer(j, "peak_memory_bytes", 0);
  return s;
}

ExecEval parse_eval(const json& j) {
  ExecEval e;
  e.name = text(j, "name");
  e.value = number_or_nan(j, "value");
  if (j.contains("step")) e.step = integer(j, "step", std::numeric_limits<int64_t>::min());
  if (j.contains("higher_is_better")) {
    if (!j["higher_is_better"].is_boolean()) throw BadLine{"'higher_is_better' must be true or false"};
    e.higher_is_better = j["higher_is_better"].get<bool>();
  }
  return e;
}

ExecEnd parse_end(const json& j) {
  ExecEnd e;
  e.status = status_of(text(j, "status"));
  if (j.contains("message")) e.message = text(j, "message");
  return e;
}

}  // namespace

std::string to_string(ExecStatus s) {
  switch (s) {
    case ExecStatus::kOk: return "ok";
    case ExecStatus::kOom: return "oom";
    case ExecStatus::kError: return "error";
  }
  return "error";
}

ExecMetricsReader::ExecMetricsReader(std::string source, ExecTransport transport, bool all_ranks)
    : source_(std::move(source)), transport_(transport), all_ranks_(all_ranks) {}

void ExecMetricsReader::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c != '\n') {
      if (pending_.size() < kMaxPendingBytes) pending_.push_back(c);
      continue;
    }
    const std::string line = std::move(pending_);
    pending_.clear();
    read_line(line);
  }
}

void ExecMetricsReader::finish() { pending_.clear(); }

std::optional<ExecEnd> ExecMetricsReader::end() const {
  for (const ExecEnd& e : ends_)
    if (e.rank == 0) return e;
  if (!ends_.empty()) return ends_.front();
  return std::nullopt;
}

void ExecMetricsReader::ignore(const std::string& where, const std::string& why) {
  warnings_.push_back(where + ": " + why + "; line ignored");
  ++ignored_;
  SATURATE_CHECK(ignored_ <= kExecMaxIgnoredLines, where, ": more than ", kExecMaxIgnoredLines,
                 " lines ignored (the last: ", why,
                 "): the program does not speak saturate's exec protocol (docs/exec-protocol.md)");
}

void ExecMetricsReader::read_line(std::string_view line) {
  ++line_number_;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (transport_ == ExecTransport::kStdout) {
    if (line.substr(0, kExecStdoutPrefix.size()) != kExecStdoutPrefix) return;  // its own output
    line.remove_prefix(kExecStdoutPrefix.size());
  }
  const std::string where = source_ + ":" + std::to_string(line_number_);
  if (transport_ == ExecTransport::kFile && line.find_first_not_of(" \t") == std::string_view::npos)
    return;
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return ignore(where, "not a JSON object");
  read_object(j, where);
}

void ExecMetricsReader::read_object(const json& j, const std::string& where) {
  const auto v = j.find("v");
  if (v != j.end() && v->is_number_integer() && v->get<int64_t>() != kExecProtocolVersion)
    SATURATE_CHECK(false, where, ": protocol version ", v->get<int64_t>(),
                   " is not supported (this saturate speaks ", kExecProtocolVersion, ")");
  const std::string ev = j.contains("ev") && j["ev"].is_string() ? j["ev"].get<std::string>() : "";
  const bool fatal = ev == "start" || ev == "end";
  try {
    if (v == j.end() || !v->is_number_integer()) throw BadLine{"'v' must be the integer 1"};
    if (ev.empty()) throw BadLine{"'ev' must be a string"};
    const double t = number(j, "t");
    const int rank = all_ranks_ ? static_cast<int>(integer(j, "rank", 0)) : 0;
    RankState& r = ranks_[rank];
    if (ev == "start") {
      SATURATE_CHECK(!r.started, where, ": a second start line", all_ranks_ ? " for rank " : "",
                     all_ranks_ ? std::to_string(rank) : std::string());
      ExecStart s = parse_start(j);
      s.rank = rank, s.t = t;
      r.started = true, r.last_t = t;
      starts_.push_back(std::move(s));
      return;
    }
    if (ev != "step" && ev != "eval" && ev != "end") return;  // a later version's event
    SATURATE_CHECK(r.started, where, ": a '", ev, "' line before the start line");
    if (r.ended) return ignore(where, "after the end line");
    if (t < r.last_t) throw BadLine{"'t' is earlier than the previous line's"};
    if (ev == "end") {
      ExecEnd e = parse_end(j);
      e.rank = rank, e.t = t;
      r.ended = true, r.last_t = t;
      ends_.push_back(std::move(e));
    } else if (ev == "eval") {
      ExecEval e = parse_eval(j);
      e.rank = rank, e.t = t;
      r.last_t = t;
      evals_.push_back(std::move(e));
    } else {
      ExecStep s = parse_step(j);
      if (s.step <= r.last_step) throw BadLine{"'step' is not greater than the previous step's"};
      s.rank = rank, s.t = t;
      r.last_step = s.step, r.last_t = t;
      steps_.push_back(s);
    }
  } catch (const BadLine& bad) {
    SATURATE_CHECK(!fatal, where, ": a malformed ", ev, " line: ", bad.why);
    ignore(where, bad.why);
  }
}

std::string find_oom_pattern(std::string_view text) {
  static const char* const kPatterns[] = {
      "CUDA out of memory",         "CUDA error: out of memory",
      "HIP out of memory",          "MPS backend out of memory",
      "CUBLAS_STATUS_ALLOC_FAILED", "DefaultCPUAllocator: can't allocate memory",
      "is killed by signal: Killed", "is killed by signal: Bus error"};
  for (const char* p : kPatterns)
    if (text.find(p) != std::string_view::npos) return p;
  // Python's own allocation failure, at the start of a line of the traceback.
  for (size_t at = text.find("MemoryError"); at != std::string_view::npos;
       at = text.find("MemoryError", at + 1))
    if (at == 0 || text[at - 1] == '\n') return "MemoryError";
  return "";
}

namespace {

std::string error_file_message(const std::string& error_file) {
  if (error_file.empty()) return "";
  const json j = json::parse(error_file, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message")) return "";
  const json& m = j["message"];
  if (m.is_object() && m.contains("message") && m["message"].is_string())
    return m["message"].get<std::string>();
  return m.is_string() ? m.get<std::string>() : "";
}

// The program's own last words: the last non-empty line of its stderr.
std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end - (start == std::string::npos ? 0 : start + 1) + 1);
}

std::string how_it_ended(const ExecExit& x) {
  if (x.signal != 0)
    return "killed by signal " + std::to_string(x.signal) +
           (x.signal_sent_by_saturate ? " (sent by saturate)" : "");
  return "exit status " + std::to_string(x.exit_code);
}

}  // namespace

ExecOutcome classify_exec_exit(const ExecExit& x) {
  if (x.end && x.end->status == ExecStatus::kOom)
    return {ExecStatus::kOom, "end line: " + first_line(x.end->message)};
  if (x.signal == 0 && x.exit_code == 75) return {ExecStatus::kOom, "exit status 75"};
  const std::string elastic = error_file_message(x.error_file);
  if (const std::string p = find_oom_pattern(elastic); !p.empty())
    return {ExecStatus::kOom, "error file: " + first_line(elastic)};
  if (const std::string p = find_oom_pattern(x.stderr_tail); !p.empty())
    return {ExecStatus::kOom, "stderr: " + p};
  if (x.signal == SIGKILL && !x.signal_sent_by_saturate && x.oom_kill_rose)
    return {ExecStatus::kOom, "killed by the kernel's OOM killer (memory.events oom_kill rose)"};
  const bool exited_ok = x.signal == 0 && x.exit_code == 0;
  if (exited_ok && (!x.end || x.end->status == ExecStatus::kOk)) return {ExecStatus::kOk, ""};
  // The program's own message: its end line, its error file, its stderr.
  std::string message = x.end && !x.end->message.empty() ? first_line(x.end->message)
                        : !elastic.empty()               ? first_line(elastic)
                                                         : last_line(x.stderr_tail);
  const std::string ended = exited_ok ? "its end line says error" : how_it_ended(x);
  return {ExecStatus::kError, message.empty() ? ended : ended + ": " + message};
}

}  // namespace saturate
