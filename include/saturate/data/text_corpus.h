// SPDX-License-Identifier: Apache-2.0
#pragma once
// Text for language models: a text file or folder tokenised once into a packed token cache
// (uint16 or uint32 ids, memory-mapped, keyed by the corpus's content and the tokenizer), then
// served as windows of `seq_len` tokens with next-token targets. Training windows start at
// random positions of the training stream; validation windows tile the held-out tail.
//
//   TextSpec spec = parse_text_spec("text:corpus.txt,tokenizer=bytes");
//   auto corpus = open_token_corpus(spec, token_cache_dir());
//   auto train = make_token_window_source(corpus, 0, corpus->train_end(0.1), 128);

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "saturate/data/dataset.h"
#include "saturate/data/sample_source.h"

namespace saturate {

/// "text:PATH[,tokenizer=bytes|spm:MODEL|train-spm:VOCAB]".
struct TextSpec {
  std::string path;              ///< a text file, or a folder whose files are read in name order
  std::string tokenizer = "bytes";  ///< "bytes", "spm:MODEL" or "train-spm:VOCAB"
};

bool is_text_spec(const std::string& spec);
/// Throws saturate::Error naming the field for a malformed spec or an unknown tokenizer.
TextSpec parse_text_spec(const std::string& spec);

/// Text to ids and back.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Identifies the tokenizer and its model in the cache key: "bytes-v1", "spm-<crc>".
  virtual std::string id() const = 0;
  virtual int64_t vocab_size() const = 0;
  /// Appends the ids of `text` to `out`.
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  /// The id put between two files of a folder, -1 when there is none.
  virtual int32_t end_of_document() const = 0;
  /// Appends the ids of `files` (`bytes` in all) to `out`, end_of_document() between files when
  /// there are several. The default reads each file and encode()s it.
  virtual void encode_files(const std::vector<std::string>& files, int64_t bytes,
                            std::vector<int32_t>& out) const;
};

/// Bytes as ids 0..255 and 256 for the end of a document: no training, no unknown tokens.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

/// The tokenizer a spec names: bytes, or "spm:MODEL" (a SentencePiece model file, run through
/// the saturate-spm helper program: Debian's libsentencepiece cannot share a process with
/// LibTorch). "train-spm:VOCAB" needs the corpus: open_token_corpus() trains it.
std::unique_ptr<Tokenizer> make_tokenizer(const TextSpec& spec);
/// Whether the saturate-spm helper was built and found.
bool have_sentencepiece();

/// A token cache, mapped read-only.
class TokenCorpus {
 public:
  ~TokenCorpus();
  TokenCorpus(const TokenCorpus&) = delete;
  TokenCorpus& operator=(const TokenCorpus&) = delete;
  int64_t size() const { return tokens_; }
  int64_t vocab_size() const { return vocab_; }
  int64_t token(int64_t i) const;
  /// Writes tokens [begin, begin + n) to `out`; the range must lie in [0, size()).
  void copy(int64_t begin, int64_t n, int64_t* out) const;
  /// The first token of the held-out tail when `val_fraction` of the stream is held out.
  int64_t train_end(double val_fraction) const;
  const std::string& cache_path() const { return cache_path_; }
  bool was_cached() const { return was_cached_; }  ///< read from an existing cache file
  double tokenize_s() const { return tokenize_s_; }  ///< 0 when it was cached
  int64_t corpus_bytes() const { return corpus_bytes_; }
  const std::string& tokenizer_id() const { return tokenizer_id_; }
  /// "text:shakespeare (5.1 MB, 42 files): 5.1M tokens, bytes tokenizer, vocab 257, cached".
  std::string describe() const;

 private:
  friend std::shared_ptr<const TokenCorpus> open_token_corpus(const TextSpec&, const std::string&);
  TokenCorpus() = default;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const uint8_t* data_ = nullptr;
  int width_ = 2;
  int64_t tokens_ = 0, vocab_ = 0, corpus_bytes_ = 0, files_ = 0;
  std::string cache_path_, tokenizer_id_, path_;
  bool was_cached_ = false;
  double tokenize_s_ = 0;
};

/// $SATURATE_CACHE_DIR/tokens, else $XDG_CACHE_HOME/saturate/tokens, else
/// $HOME/.cache/saturate/tokens.
std::string token_cache_dir();

/// Tokenises the corpus unless `cache_dir` already holds a valid cache for its content and
/// tokenizer (train-spm:VOCAB first trains a model, kept in `cache_dir` under the corpus's
/// fingerprint, unless it is there); a corrupt or truncated cache is reported on the log and rebuilt. Writes are
/// atomic (temporary file, rename). Throws saturate::Error naming the path for a missing,
/// unreadable or empty corpus, or a file above 1 GiB.
std::shared_ptr<const TokenCorpus> open_token_corpus(const TextSpec& spec,
                                                     const std::string& cache_dir);

/// Windows of `seq_len` tokens from [begin, end) of the stream: sample i (0 <= i < size(), size
/// = (end - begin - 1) / seq_len, so an epoch reads about every token once) starts at a random
/// position drawn from the loader's per-sample number. Throws saturate::Error when the range
/// holds fewer than seq_len + 1 tokens.
std::unique_ptr<SampleSource> make_token_window_source(std::shared_ptr<const TokenCorpus> corpus,
                                                       int64_t begin, int64_t end,
                                                       int64_t seq_len);

/// Non-overlapping windows tiling [begin, end), in memory: inputs and targets int64 [N, seq_len].
TensorDataset token_windows_in_memory(const TokenCorpus& corpus, int64_t begin, int64_t end,
                                      int64_t seq_len, const std::string& name);

}  // namespace saturate
