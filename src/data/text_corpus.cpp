// SPDX-License-Identifier: Apache-2.0
#include "saturate/data/text_corpus.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <torch/torch.h>

#include "saturate/core/atomic_file.h"
#include "saturate/core/crc32c.h"
#include "saturate/core/error.h"
#include "saturate/core/log.h"
#include "saturate/core/strings.h"
#include "saturate/core/temp_folder.h"
#include "saturate/core/units.h"
#include "data/file_bytes.h"
#include "data/text_spm.h"

namespace saturate {
namespace {

using detail::concat;

constexpr char kMagic[8] = {'S', 'A', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kMaxFileBytes = int64_t{1} << 30;
constexpr int64_t kMaxFiles = 100000;
constexpr int64_t kMaxVocab = int64_t{1} << 24;

// The cache file's fixed header (little-endian, as every machine this runs on).
struct CacheHeader {
  char magic[8];
  uint32_t version;
  uint32_t width;  // bytes per token: 2 or 4
  uint64_t tokens, vocab, corpus_bytes, files;
  uint32_t corpus_crc, payload_crc;
  char tokenizer[64];
  char pad[8];
};
static_assert(sizeof(CacheHeader) == 128, "the cache header is 128 bytes");

class ByteTokenizer final : public Tokenizer {
 public:
  std::string id() const override { return "bytes-v1"; }
  int64_t vocab_size() const override { return 257; }
  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    out.reserve(out.size() + text.size());
    for (char c : text) out.push_back(static_cast<unsigned char>(c));
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids)
      if (id >= 0 && id < 256) s.push_back(static_cast<char>(id));
    return s;
  }
  int32_t end_of_document() const override { return 256; }
};

void list_files(const std::string& dir, int depth, std::vector<std::string>& out) {
  DIR* d = ::opendir(dir.c_str());
  SATURATE_CHECK(d != nullptr, "data: ", dir, ": cannot open: ", std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) continue;
    if (S_ISDIR(info.st_mode) && depth < 8) list_files(path, depth + 1, out);
    if (S_ISREG(info.st_mode)) out.push_back(path);
    SATURATE_CHECK(static_cast<int64_t>(out.size()) <= kMaxFiles, "data: ", dir, " holds more than ",
                   kMaxFiles, " files");
  }
}

std::vector<std::string> corpus_files(const std::string& path) {
  struct stat info {};
  SATURATE_CHECK(::stat(path.c_str(), &info) == 0, "data: text corpus ", path,
                 " does not exist");
  std::vector<std::string> files;
  if (S_ISDIR(info.st_mode))
    list_files(path, 0, files);
  else
    files.push_back(path);
  SATURATE_CHECK(!files.empty(), "data: text corpus ", path, " is an empty folder");
  return files;
}

std::vector<uint8_t> read_corpus_file(const std::string& file) {
  struct stat info {};
  SATURATE_CHECK(::stat(file.c_str(), &info) == 0, "data: ", file, ": cannot open");
  SATURATE_CHECK(info.st_size <= kMaxFileBytes, "data: ", file, " is ",
                 format_bytes(static_cast<int64_t>(info.st_size)),
                 "; a text file may hold at most 1 GiB (split it)");
  return detail::read_file_bytes(file, "data");
}

struct Fingerprint {
  uint32_t crc = 0;
  int64_t bytes = 0;
};

Fingerprint fingerprint(const std::vector<std::string>& files) {
  Fingerprint f;
  for (const std::string& file : files) {
    const std::vector<uint8_t> bytes = read_corpus_file(file);
    f.crc = crc32c_extend(f.crc, bytes.data(), bytes.size());
    const uint64_t n = bytes.size();
    f.crc = crc32c_extend(f.crc, &n, sizeof n);  // where one file ends and the next begins
    f.bytes += static_cast<int64_t>(bytes.size());
  }
  return f;
}

std::string cache_file_name(const std::string& tokenizer_id, const Fingerprint& f) {
  std::string id;
  for (char c : tokenizer_id) id.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", f.crc);
  return id + "-" + hex + "-" + std::to_string(f.bytes) + ".tokens";
}

// Why the cache at `path` cannot be used ("" when it can). Bounded: the header is checked
// against the file's size before any token is read.
std::string cache_problem(const std::string& tokenizer_id,
                          const Fingerprint& f, int fd, CacheHeader& h) {
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) return "not a regular file";
  const auto size = static_cast<uint64_t>(info.st_size);
  if (size < sizeof h) return concat("truncated (", size, " bytes)");
  if (::pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) return "unreadable header";
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return "not a token cache";
  if (h.version != kVersion) return concat("version ", h.version, ", not ", kVersion);
  if (h.width != 2 && h.width != 4) return concat("token width ", h.width);
  if (h.vocab == 0 || h.vocab > static_cast<uint64_t>(kMaxVocab)) return "bad vocabulary size";
  if (h.tokens > (size - sizeof h) / h.width || size != sizeof h + h.tokens * h.width)
    return concat("size ", size, " does not hold ", h.tokens, " tokens");
  if (std::string(h.tokenizer, strnlen(h.tokenizer, sizeof h.tokenizer)) != tokenizer_id)
    return "another tokenizer";
  if (h.corpus_crc != f.crc || h.corpus_bytes != static_cast<uint64_t>(f.bytes))
    return "another corpus";
  return "";
}

int64_t read_token(const uint8_t* data, int width, int64_t i) {
  if (width == 2) {
    uint16_t v;
    std::memcpy(&v, data + i * 2, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, data + i * 4, 4);
  return v;
}

// Tokenises every file and writes the cache atomically (temporary file, fsync, rename).
void write_cache(const std::string& path, const Tokenizer& tok,
                 const std::vector<std::string>& files, const Fingerprint& f) {
  std::vector<int32_t> ids;
  tok.encode_files(files, f.bytes, ids);
  CacheHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.width = tok.vocab_size() <= 65536 ? 2 : 4;
  h.tokens = ids.size();
  h.vocab = static_cast<uint64_t>(tok.vocab_size());
  h.corpus_bytes = static_cast<uint64_t>(f.bytes);
  h.files = files.size();
  h.corpus_crc = f.crc;
  std::snprintf(h.tokenizer, sizeof h.tokenizer, "%s", tok.id().c_str());
  std::vector<uint8_t> payload(ids.size() * h.width);
  for (size_t i = 0; i < ids.size(); ++i) {
    SATURATE_ASSERT(ids[i] >= 0 && ids[i] < tok.vocab_size(), "token id ", ids[i], " out of range");
    if (h.width == 2) {
      const auto v = static_cast<uint16_t>(ids[i]);
      std::memcpy(payload.data() + i * 2, &v, 2);
    } else {
      const auto v = static_cast<uint32_t>(ids[i]);
      std::memcpy(payload.data() + i * 4, &v, 4);
    }
  }
  h.payload_crc = crc32c(payload.data(), payload.size());
  const std::string why =
      write_file_atomically(path, {{&h, sizeof h}, {payload.data(), payload.size()}});
  SATURATE_CHECK_RUN(why.empty(), "data: cannot write token cache ", path, ": ", why);
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

class TokenWindowSource final : public SampleSource {
 public:
  TokenWindowSource(std::shared_ptr<const TokenCorpus> c, int64_t begin, int64_t end, int64_t t)
      : c_(std::move(c)), begin_(begin), end_(end), t_(t) {}
  int64_t size() const override { return (end_ - begin_ - 1) / t_; }
  std::vector<int64_t> sample_shape() const override { return {t_}; }
  int64_t num_classes() const override { return c_->vocab_size(); }
  int64_t read(int64_t, uint8_t*) const override {
    SATURATE_ASSERT(false, "token windows are read with read_tokens()");
    return 0;
  }
  bool is_token_source() const override { return true; }
  void read_tokens(int64_t index, uint64_t draw, int64_t* inputs,
                   int64_t* targets) const override {
    SATURATE_ASSERT(index >= 0 && index < size(), "window ", index, " out of range");
    // Any start whose window and its next-token target fit: [begin, end - t - 1].
    const auto starts = static_cast<uint64_t>(end_ - begin_ - t_);
    const int64_t start = begin_ + static_cast<int64_t>(draw % starts);
    c_->copy(start, t_, inputs);
    c_->copy(start + 1, t_, targets);
  }
  std::string describe() const override {
    return concat("text windows of ", t_, " tokens from tokens [", begin_, ", ", end_, ") of ",
                  c_->cache_path());
  }

 private:
  std::shared_ptr<const TokenCorpus> c_;
  int64_t begin_, end_, t_;
};

}  // namespace

std::unique_ptr<SampleSource> make_token_window_source(std::shared_ptr<const TokenCorpus> corpus,
                                                       int64_t begin, int64_t end,
                                                       int64_t seq_len) {
  SATURATE_CHECK(seq_len >= 1, "--seq-len must be positive, got ", seq_len);
  SATURATE_CHECK(begin >= 0 && end <= corpus->size() && end - begin >= seq_len + 1,
                 "data: ", corpus->describe(), ": ", end - begin, " tokens hold no window of ",
                 "--seq-len ", seq_len, " (it needs ", seq_len + 1, ")");
  return std::make_unique<TokenWindowSource>(std::move(corpus), begin, end, seq_len);
}

TensorDataset token_windows_in_memory(const TokenCorpus& corpus, int64_t begin, int64_t end,
                                      int64_t seq_len, const std::string& name) {
  SATURATE_CHECK(seq_len >= 1 && begin >= 0 && end <= corpus.size() && end - begin >= seq_len + 1,
                 "data: ", corpus.describe(), ": the ", name, " split's ", end - begin,
                 " tokens hold no window of --seq-len ", seq_len);
  const int64_t n = (end - begin - 1) / seq_len;
  TensorDataset d;
  d.name = name;
  d.num_classes = corpus.vocab_size();
  d.inputs = torch::empty({n, seq_len}, torch::kLong);
  d.targets = torch::empty({n, seq_len}, torch::kLong);
  int64_t* x = d.inputs.data_ptr<int64_t>();
  int64_t* y = d.targets.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    corpus.copy(begin + i * seq_len, seq_len, x + i * seq_len);
    corpus.copy(begin + i * seq_len + 1, seq_len, y + i * seq_len);
  }
  return d;
}

bool is_text_spec(const std::string& spec) { return spec.rfind("text:", 0) == 0; }

TextSpec parse_text_spec(const std::string& spec) {
  SATURATE_CHECK(is_text_spec(spec), "data: '", spec, "' is not a text:PATH spec");
  TextSpec t;
  std::string rest = spec.substr(5);
  const size_t opt = rest.rfind(",tokenizer=");
  if (opt != std::string::npos) {
    t.tokenizer = rest.substr(opt + 11);
    rest = rest.substr(0, opt);
  }
  SATURATE_CHECK(!rest.empty(), "data: text: needs a path, as in text:corpus.txt");
  t.path = rest;
  const std::string& k = t.tokenizer;
  if (k.rfind("spm:", 0) == 0) {
    SATURATE_CHECK(k.size() > 4, "data: tokenizer=spm: needs a SentencePiece model file");
  } else if (k.rfind("train-spm:", 0) == 0) {
    const std::string v = k.substr(10);
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    SATURATE_CHECK(!v.empty() && end != nullptr && *end == '\0' && n >= 16 && n <= 65536,
                   "data: tokenizer=train-spm:VOCAB needs a vocabulary size in [16, 65536], got '",
                   v, "'");
  } else {
    SATURATE_CHECK(k == "bytes", "data: unknown tokenizer '", k,
                   "' (bytes, spm:MODEL or train-spm:VOCAB)");
  }
  return t;
}

void Tokenizer::encode_files(const std::vector<std::string>& files, int64_t,
                             std::vector<int32_t>& out) const {
  for (const std::string& file : files) {
    const std::vector<uint8_t> bytes = read_corpus_file(file);
    encode(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), out);
    if (end_of_document() >= 0 && files.size() > 1) out.push_back(end_of_document());
  }
}

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

bool have_sentencepiece() { return !detail::spm_helper_path().empty(); }

std::unique_ptr<Tokenizer> make_tokenizer(const TextSpec& spec) {
  if (spec.tokenizer.rfind("spm:", 0) == 0) return detail::make_spm_tokenizer(spec.tokenizer.substr(4));
  SATURATE_CHECK(spec.tokenizer == "bytes", "data: tokenizer=", spec.tokenizer,
                 " needs the corpus to train on: open the corpus with open_token_corpus()");
  return make_byte_tokenizer();
}

namespace {

// train-spm:VOCAB: the model trained on this corpus, under the corpus's fingerprint, trained
// now when the cache folder does not hold it yet.
std::unique_ptr<Tokenizer> corpus_tokenizer(const TextSpec& spec,
                                            const std::vector<std::string>& files,
                                            const Fingerprint& f, const std::string& cache_dir) {
  if (spec.tokenizer.rfind("train-spm:", 0) != 0) return make_tokenizer(spec);
  const int64_t vocab = std::stoll(spec.tokenizer.substr(10));
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", f.crc);
  const std::string model =
      concat(cache_dir, "/spm-unigram", vocab, "-", hex, "-", f.bytes, ".model");
  detail::train_spm_model(vocab, files, model);
  return detail::make_spm_tokenizer(model);
}

}  // namespace

std::string token_cache_dir() {
  std::string root = env_or_empty("SATURATE_CACHE_DIR");
  if (!root.empty()) return root + "/tokens";
  root = env_or_empty("XDG_CACHE_HOME");
  if (root.empty()) root = env_or_empty("HOME") + "/.cache";
  return root + "/saturate/tokens";
}

TokenCorpus::~TokenCorpus() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
}

int64_t TokenCorpus::token(int64_t i) const {
  SATURATE_ASSERT(i >= 0 && i < tokens_, "token ", i, " out of range");
  return read_token(data_, width_, i);
}

void TokenCorpus::copy(int64_t begin, int64_t n, int64_t* out) const {
  SATURATE_ASSERT(begin >= 0 && n >= 0 && begin + n <= tokens_, "tokens [", begin, ", ",
                  begin + n, ") out of range");
  if (width_ == 2) {
    const uint8_t* p = data_ + begin * 2;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, p + i * 2, 2);
      out[i] = v;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = read_token(data_, 4, begin + i);
  }
}

int64_t TokenCorpus::train_end(double val_fraction) const {
  return tokens_ - static_cast<int64_t>(std::llround(val_fraction * static_cast<double>(tokens_)));
}

std::string TokenCorpus::describe() const {
  return concat("text:", path_, " (", format_bytes(corpus_bytes_), ", ",
                files_, files_ == 1 ? " file" : " files", "): ", tokens_, " tokens, ",
                tokenizer_id_, " tokenizer, vocab ", vocab_,
                was_cached_ ? ", cached" : concat(", tokenised in ", format_fixed(tokenize_s_, 2), " s"));
}

std::shared_ptr<const TokenCorpus> open_token_corpus(const TextSpec& spec,
                                                     const std::string& cache_dir) {
  const std::vector<std::string> files = corpus_files(spec.path);
  const Fingerprint f = fingerprint(files);
  SATURATE_CHECK(f.bytes > 0, "data: text corpus ", spec.path, " is empty");
  make_folders(cache_dir, "token cache folder");
  const std::unique_ptr<Tokenizer> tok = corpus_tokenizer(spec, files, f, cache_dir);
  const std::string path = cache_dir + "/" + cache_file_name(tok->id(), f);
  std::shared_ptr<TokenCorpus> c(new TokenCorpus());
  c->path_ = spec.path;
  c->files_ = static_cast<int64_t>(files.size());
  c->corpus_bytes_ = f.bytes;
  c->tokenizer_id_ = tok->id();
  c->cache_path_ = path;
  CacheHeader h{};
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
      std::string problem = cache_problem(tok->id(), f, fd, h);
      if (problem.empty()) {
        void* m = ::mmap(nullptr, sizeof h + h.tokens * h.width, PROT_READ, MAP_SHARED, fd, 0);
        ::close(fd);
        SATURATE_CHECK_RUN(m != MAP_FAILED, "data: cannot map ", path, ": ", std::strerror(errno));
        c->mapping_ = m;
        c->mapping_bytes_ = sizeof h + h.tokens * h.width;
        c->data_ = static_cast<const uint8_t*>(m) + sizeof h;
        c->width_ = static_cast<int>(h.width);
        c->tokens_ = static_cast<int64_t>(h.tokens);
        c->vocab_ = static_cast<int64_t>(h.vocab);
        if (crc32c(c->data_, h.tokens * h.width) == h.payload_crc) {
          c->was_cached_ = attempt == 0;
          break;
        }
        ::munmap(c->mapping_, c->mapping_bytes_);
        c->mapping_ = nullptr;
        problem = "checksum mismatch";
      } else {
        ::close(fd);
      }
      SATURATE_CHECK_RUN(attempt == 0, "data: the token cache just written to ", path,
                         " does not read back: ", problem);
      SATURATE_LOG_WARN("data: token cache ", path, " is unusable (", problem, "); rebuilding it");
    }
    SATURATE_CHECK_RUN(attempt == 0, "data: cannot open token cache ", path);
    const auto t0 = std::chrono::steady_clock::now();
    write_cache(path, *tok, files, f);
    c->tokenize_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  SATURATE_CHECK(c->tokens_ > 0, "data: text corpus ", spec.path, " holds no tokens");
  return c;
}

}  // namespace saturate
