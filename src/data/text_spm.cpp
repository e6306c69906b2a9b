// SPDX-License-Identifier: Apache-2.0
#include "data/text_spm.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "saturate/core/atomic_file.h"
#include "saturate/core/crc32c.h"
#include "saturate/core/error.h"
#include "saturate/core/log.h"
#include "saturate/core/strings.h"
#include "saturate/core/temp_folder.h"
#include "data/file_bytes.h"

extern char** environ;

namespace saturate::detail {
namespace {

constexpr int64_t kMaxModelBytes = int64_t{256} << 20;

bool can_run(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

std::string self_folder() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string exe(buf, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

std::string read_small(const std::string& path) {
  std::string s;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return s;
  char buf[4096];
  size_t n;
  while (s.size() < 65536 && (n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

struct HelperRun {
  int code = -1;        // the exit status; -1: killed or did not start
  std::string out, err;  // the first 64 KiB of each
};

// Runs the helper with `args`, its output into `scratch`, for at most `timeout_s` seconds; on
// the limit only the child it started is killed.
HelperRun run_helper(const std::vector<std::string>& args, const TempFolder& scratch,
                     double timeout_s) {
  const std::string helper = spm_helper_path();
  SATURATE_CHECK(!helper.empty(), "data: SentencePiece tokenizers need the saturate-spm helper, "
                 "which was not built (install libsentencepiece-dev and rebuild) or not found "
                 "(set SATURATE_SPM to its path)");
  std::vector<std::string> words = {helper};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, scratch.file("out").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, scratch.file("err").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, helper.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  SATURATE_CHECK_RUN(spawned == 0 && pid > 1, "data: cannot start ", helper, ": ",
                     std::strerror(spawned));
  HelperRun r;
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      ::kill(pid, SIGKILL);  // pid > 1: the child started above, not yet reaped
      ::waitpid(pid, &status, 0);
      SATURATE_CHECK_RUN(false, "data: ", helper, " ", args.front(), " ran past its limit of ",
                         static_cast<int64_t>(timeout_s), " s and was stopped");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_small(scratch.file("out"));
  r.err = read_small(scratch.file("err"));
  while (!r.err.empty() && (r.err.back() == '\n' || r.err.back() == '\r')) r.err.pop_back();
  return r;
}

// The helper's own line, as a saturate::Error: exit 2 (bad input) stays a usage error.
[[noreturn]] void helper_failed(const HelperRun& r, const std::string& what) {
  std::string line = r.err.substr(r.err.rfind('\n') == std::string::npos ? 0 : r.err.rfind('\n') + 1);
  if (line.rfind("saturate-spm: ", 0) == 0) line = line.substr(14);
  if (r.code == 2) SATURATE_CHECK(false, "data: ", line.empty() ? what : line);
  SATURATE_CHECK_RUN(false, "data: ", what, ": ", line.empty() ? concat("exit ", r.code) : line);
  std::abort();  // unreachable: the checks above throw
}

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(std::string model) : model_(std::move(model)) {
    struct stat info {};
    SATURATE_CHECK(::stat(model_.c_str(), &info) == 0 && S_ISREG(info.st_mode), "data: tokenizer=spm:",
                   model_, ": no such model file");
    SATURATE_CHECK(info.st_size <= kMaxModelBytes, "data: tokenizer=spm:", model_,
                   " is larger than 256 MiB: not a SentencePiece model");
    const std::vector<uint8_t> bytes = read_file_bytes(model_, "data");
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", crc32c(bytes.data(), bytes.size()));
    id_ = std::string("spm-") + hex;
    const TempFolder scratch("saturate-spm", "data");
    const HelperRun r = run_helper({"info", model_}, scratch, 60);
    if (r.code != 0) helper_failed(r, "tokenizer=spm:" + model_);
    long long vocab = 0, eos = -1, newline = -1;
    SATURATE_CHECK_RUN(std::sscanf(r.out.c_str(), "vocab %lld eos %lld newline %lld", &vocab,
                                   &eos, &newline) == 3 && vocab > 0 && vocab <= (1 << 24),
                       "data: saturate-spm info ", model_, " answered '", r.out, "'");
    vocab_ = vocab;
    eos_ = static_cast<int32_t>(eos < vocab ? eos : -1);
  }
  std::string id() const override { return id_; }
  int64_t vocab_size() const override { return vocab_; }
  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    const TempFolder scratch("saturate-spm", "data");
    write_all(scratch.file("text"), text.data(), text.size());
    encode_into(scratch, {scratch.file("text")}, text.size(), out);
  }
  void encode_files(const std::vector<std::string>& files, int64_t bytes,
                    std::vector<int32_t>& out) const override {
    const TempFolder scratch("saturate-spm", "data");
    encode_into(scratch, files, bytes, out);
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    const TempFolder scratch("saturate-spm", "data");
    std::vector<uint32_t> raw(ids.begin(), ids.end());
    write_all(scratch.file("ids"), raw.data(), raw.size() * 4);
    const HelperRun r = run_helper({"decode", model_, scratch.file("ids")}, scratch, 600);
    if (r.code != 0) helper_failed(r, "decoding with " + model_);
    return r.out;
  }
  int32_t end_of_document() const override { return eos_; }

 private:
  static void write_all(const std::string& path, const void* data, size_t n) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    const bool ok = f != nullptr && std::fwrite(data, 1, n, f) == n;
    if (f != nullptr) std::fclose(f);
    SATURATE_CHECK_RUN(ok, "data: cannot write ", path);
  }

  // Ids are bounded before they are read: a line's pieces are at most its bytes, plus a newline
  // piece per line and an end of document per file.
  void encode_into(const TempFolder& scratch, const std::vector<std::string>& files,
                   int64_t bytes, std::vector<int32_t>& out) const {
    std::vector<std::string> args = {"encode", model_, scratch.file("ids")};
    args.insert(args.end(), files.begin(), files.end());
    const HelperRun r = run_helper(args, scratch, 120 + static_cast<double>(bytes) / 2e5);
    if (r.code != 0) helper_failed(r, "tokenising with " + model_);
    struct stat info {};
    SATURATE_CHECK_RUN(::stat(scratch.file("ids").c_str(), &info) == 0, "data: saturate-spm wrote no ids");
    const auto size = static_cast<int64_t>(info.st_size);
    const int64_t bound = 4 * (2 * bytes + static_cast<int64_t>(files.size()) + 1);
    SATURATE_CHECK_RUN(size % 4 == 0 && size <= bound, "data: saturate-spm wrote ", size,
                       " bytes of ids for ", bytes, " bytes of text");
    const std::vector<uint8_t> raw = read_file_bytes(scratch.file("ids"), "data");
    out.reserve(out.size() + raw.size() / 4);
    for (size_t i = 0; i + 4 <= raw.size(); i += 4) {
      uint32_t v;
      std::memcpy(&v, raw.data() + i, 4);
      SATURATE_CHECK_RUN(v < static_cast<uint64_t>(vocab_), "data: saturate-spm wrote id ", v,
                         " outside the vocabulary of ", vocab_);
      out.push_back(static_cast<int32_t>(v));
    }
  }

  std::string model_, id_;
  int64_t vocab_ = 0;
  int32_t eos_ = -1;
};

}  // namespace

std::string spm_helper_path() {
  if (const char* env = std::getenv("SATURATE_SPM"); env != nullptr && *env != '\0')
    return can_run(env) ? std::string(env) : std::string();
  const std::string here = self_folder();
  for (const std::string& p :
       {here.empty() ? std::string() : here + "/saturate-spm", std::string(SATURATE_SPM_BUILD_PATH),
        std::string(SATURATE_SPM_INSTALL_PATH)})
    if (can_run(p)) return p;
  return "";
}

std::unique_ptr<Tokenizer> make_spm_tokenizer(const std::string& model) {
  return std::make_unique<SpmTokenizer>(model);
}

void train_spm_model(int64_t vocab, const std::vector<std::string>& files,
                     const std::string& model_path) {
  if (::access(model_path.c_str(), R_OK) == 0) return;
  const TempFolder scratch("saturate-spm", "data");
  int64_t bytes = 0;
  for (const std::string& f : files) {
    struct stat info {};
    if (::stat(f.c_str(), &info) == 0) bytes += static_cast<int64_t>(info.st_size);
  }
  SATURATE_LOG_INFO("data: training a SentencePiece model of ", vocab, " pieces on ", files.size(),
                    files.size() == 1 ? " file" : " files", " (once; kept as ", model_path, ")");
  std::vector<std::string> args = {"train", std::to_string(vocab), scratch.file("m")};
  args.insert(args.end(), files.begin(), files.end());
  const HelperRun r = run_helper(args, scratch, 600 + static_cast<double>(bytes) / 1e5);
  if (r.code != 0) helper_failed(r, concat("training a SentencePiece model of ", vocab, " pieces"));
  const std::vector<uint8_t> model = read_file_bytes(scratch.file("m.model"), "data");
  const std::string why = write_file_atomically(model_path, {{model.data(), model.size()}});
  SATURATE_CHECK_RUN(why.empty(), "data: cannot write ", model_path, ": ", why);
}

}  // namespace saturate::detail
