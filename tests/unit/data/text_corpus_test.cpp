// SPDX-License-Identifier: Apache-2.0
// Text data: the token cache is written once, read back on the next run, rebuilt when the
// corpus changes or the cache is damaged, and served as next-token windows by the Loader.
#include "saturate/data/text_corpus.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "saturate/core/error.h"
#include "saturate/core/temp_folder.h"
#include "saturate/data/loader.h"
#include "saturate/data/training_input.h"

namespace saturate {
namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string sample_text(int lines) {
  std::ostringstream s;
  for (int i = 0; i < lines; ++i) s << "line " << i << ": the quick brown fox jumps over it\n";
  return s.str();
}

std::vector<int32_t> as_ids(const TokenCorpus& c) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < c.size(); ++i) ids.push_back(static_cast<int32_t>(c.token(i)));
  return ids;
}

}  // namespace

TEST(TextCorpus, Issue18_BytesRoundTripAndTheCacheIsReadTheSecondTime) {
  TempFolder tmp("saturate-text", "test");
  const std::string corpus = tmp.path() + "/corpus.txt";
  const std::string text = sample_text(50) + "caf\xc3\xa9 \xe2\x82\xac\n";
  write_text(corpus, text);
  const TextSpec spec = parse_text_spec("text:" + corpus);
  EXPECT_EQ(spec.tokenizer, "bytes");
  auto first = open_token_corpus(spec, tmp.path() + "/cache");
  EXPECT_FALSE(first->was_cached());
  ASSERT_EQ(first->size(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(first->vocab_size(), 257);
  EXPECT_EQ(make_byte_tokenizer()->decode(as_ids(*first)), text);
  auto second = open_token_corpus(spec, tmp.path() + "/cache");
  EXPECT_TRUE(second->was_cached()) << second->describe();
  EXPECT_EQ(second->cache_path(), first->cache_path());
  EXPECT_EQ(as_ids(*second), as_ids(*first));
  // A changed corpus is another key: tokenised again, the new text read back.
  write_text(corpus, text + "one more line\n");
  auto third = open_token_corpus(spec, tmp.path() + "/cache");
  EXPECT_FALSE(third->was_cached());
  EXPECT_NE(third->cache_path(), first->cache_path());
  EXPECT_EQ(third->size(), first->size() + 14);
}

TEST(TextCorpus, Issue18_ACorruptOrTruncatedCacheIsRebuilt) {
  TempFolder tmp("saturate-text", "test");
  const std::string corpus = tmp.path() + "/corpus.txt";
  write_text(corpus, sample_text(40));
  const TextSpec spec = parse_text_spec("text:" + corpus);
  auto good = open_token_corpus(spec, tmp.path());
  const std::vector<int32_t> want = as_ids(*good);
  const std::string path = good->cache_path();
  good.reset();
  // A flipped byte in the tokens: the checksum catches it.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(128 + 10);
    f.put('\x7f');
  }
  auto fixed = open_token_corpus(spec, tmp.path());
  EXPECT_FALSE(fixed->was_cached()) << "a damaged cache was used";
  EXPECT_EQ(as_ids(*fixed), want);
  fixed.reset();
  // Truncated mid-token, and a header claiming 2^40 tokens: neither is read past the file.
  ASSERT_EQ(::truncate(path.c_str(), 128 + 101), 0);
  auto again = open_token_corpus(spec, tmp.path());
  EXPECT_FALSE(again->was_cached());
  EXPECT_EQ(as_ids(*again), want);
  again.reset();
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t huge = uint64_t{1} << 40;
    f.seekp(16);
    f.write(reinterpret_cast<const char*>(&huge), sizeof huge);
  }
  EXPECT_EQ(as_ids(*open_token_corpus(spec, tmp.path())), want);
}

TEST(TextCorpus, Issue18_AFolderIsReadInNameOrderWithAnEndOfDocumentBetweenFiles) {
  TempFolder tmp("saturate-text", "test");
  make_folders(tmp.path() + "/docs/sub", "test");
  write_text(tmp.path() + "/docs/b.txt", "bb");
  write_text(tmp.path() + "/docs/a.txt", "aa");
  write_text(tmp.path() + "/docs/sub/c.txt", "c");
  auto c = open_token_corpus(parse_text_spec("text:" + tmp.path() + "/docs"), tmp.path());
  const std::vector<int32_t> want = {'a', 'a', 256, 'b', 'b', 256, 'c', 256};
  EXPECT_EQ(as_ids(*c), want);
}

TEST(TextCorpus, Issue18_BadSpecsAndCorporaNameTheProblem) {
  TempFolder tmp("saturate-text", "test");
  auto message = [&](const std::string& spec) {
    try {
      open_token_corpus(parse_text_spec(spec), tmp.path() + "/cache");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("text:" + tmp.path() + "/absent.txt").find("does not exist"),
            std::string::npos);
  write_text(tmp.path() + "/empty.txt", "");
  EXPECT_NE(message("text:" + tmp.path() + "/empty.txt").find("is empty"), std::string::npos);
  EXPECT_NE(message("text:x.txt,tokenizer=words").find("unknown tokenizer 'words'"),
            std::string::npos);
  EXPECT_NE(message("text:x.txt,tokenizer=train-spm:3").find("vocabulary size"),
            std::string::npos);
  write_text(tmp.path() + "/a.txt", "abc");
  const std::string absent = message("text:" + tmp.path() + "/a.txt,tokenizer=spm:m.model");
  EXPECT_NE(absent.find("spm:m.model: no such model file"), std::string::npos) << absent;
  // A text file is no model: the helper says so, and it is a usage error naming the file.
  const std::string path = tmp.path() + "/a.txt";
  const std::string not_model = message("text:" + path + ",tokenizer=spm:" + path);
  EXPECT_NE(not_model.find(have_sentencepiece() ? path + ": not a SentencePiece model"
                                                : std::string("saturate-spm")),
            std::string::npos)
      << not_model;
}

namespace {

std::string only_model_in(const std::string& dir) {
  std::string found;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return found;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 6 && n.compare(n.size() - 6, 6, ".model") == 0) found = dir + "/" + n;
  }
  ::closedir(d);
  return found;
}

}  // namespace

// SentencePiece runs in the saturate-spm helper (its library cannot share LibTorch's process):
// a model trained on the corpus, kept in the cache folder, encodes it into far fewer tokens than
// bytes, decodes it back, and separates files with its end-of-sentence id.
TEST(TextCorpus, Issue18_SentencePieceTrainedOnTheCorpusRoundTrips) {
  if (!have_sentencepiece()) GTEST_SKIP() << "saturate-spm was not built (libsentencepiece-dev)";
  TempFolder tmp("saturate-text", "test");
  make_folders(tmp.path() + "/docs", "test");
  const std::string a = sample_text(300), b = "the fox is quick and brown\nit jumps\n";
  write_text(tmp.path() + "/docs/a.txt", a);
  write_text(tmp.path() + "/docs/b.txt", b);
  const TextSpec spec = parse_text_spec("text:" + tmp.path() + "/docs,tokenizer=train-spm:120");
  auto c = open_token_corpus(spec, tmp.path() + "/cache");
  EXPECT_FALSE(c->was_cached());
  EXPECT_EQ(c->tokenizer_id().rfind("spm-", 0), 0u) << c->tokenizer_id();
  EXPECT_LE(c->vocab_size(), 120);
  EXPECT_LT(c->size(), static_cast<int64_t>(a.size() + b.size()) * 3 / 4) << c->describe();
  const std::string model = only_model_in(tmp.path() + "/cache");
  ASSERT_FALSE(model.empty());
  const auto tok = make_tokenizer(parse_text_spec("text:x,tokenizer=spm:" + model));
  EXPECT_EQ(tok->id(), c->tokenizer_id());
  const std::vector<int32_t> ids = as_ids(*c);
  const auto eod = std::find(ids.begin(), ids.end(), tok->end_of_document());
  ASSERT_NE(eod, ids.end());
  EXPECT_EQ(tok->decode(std::vector<int32_t>(ids.begin(), eod)), a);
  EXPECT_EQ(tok->decode(std::vector<int32_t>(eod + 1, ids.end() - 1)), b);
  EXPECT_EQ(ids.back(), tok->end_of_document());
  // The second open trains nothing and reads the cache.
  auto again = open_token_corpus(spec, tmp.path() + "/cache");
  EXPECT_TRUE(again->was_cached());
  EXPECT_EQ(as_ids(*again), ids);
}

TEST(TextCorpus, Issue18_TheLoaderServesNextTokenWindowsWhateverItsWorkers) {
  TempFolder tmp("saturate-text", "test");
  const std::string corpus = tmp.path() + "/corpus.txt";
  write_text(corpus, sample_text(200));
  ASSERT_EQ(::setenv("SATURATE_CACHE_DIR", (tmp.path() + "/cache").c_str(), 1), 0);
  InputOptions in;
  in.data_spec = "text:" + corpus;
  in.seq_len = 32;
  const TrainingInput input = open_training_input(in, -1);
  ASSERT_TRUE(input.corpus);
  EXPECT_EQ(input.tokens_per_sample(), 32);
  const int64_t end = input.corpus->train_end(0.1);
  EXPECT_EQ(input.source->size(), (end - 1) / 32);
  ASSERT_EQ(input.splits.validation.inputs.sizes(), (std::vector<int64_t>{(input.corpus->size() - end - 1) / 32, 32}));
  // The validation windows tile the tail: its first window starts where training ends.
  EXPECT_EQ(input.splits.validation.inputs[0][0].item<int64_t>(), input.corpus->token(end));
  auto batches = [&](int workers) {
    Loader loader(*input.source, input.loader_options(8, 5, workers, 2));
    std::vector<at::Tensor> out;
    for (int i = 0; i < 4; ++i) {
      auto b = loader.next();
      EXPECT_TRUE(b.has_value());
      if (!b) break;
      EXPECT_EQ(b->inputs.scalar_type(), at::kLong);
      EXPECT_EQ(b->inputs.sizes(), (std::vector<int64_t>{8, 32}));
      // Targets are the inputs shifted by one token, and every window lies in the training part.
      EXPECT_TRUE(torch::equal(b->inputs.slice(1, 1), b->targets.slice(1, 0, 31)));
      out.push_back(b->inputs.clone());
      out.push_back(b->targets.clone());
    }
    return out;
  };
  const auto zero = batches(0), two = batches(2);
  ASSERT_EQ(zero.size(), two.size());
  for (size_t i = 0; i < zero.size(); ++i) EXPECT_TRUE(torch::equal(zero[i], two[i])) << i;
  InputOptions images;
  images.data_spec = "synthetic:1,8,8,4,20";
  images.seq_len = 16;
  EXPECT_THROW(open_training_input(images, -1), Error) << "--seq-len with images";
  in.seq_len = 100000;
  EXPECT_THROW(open_training_input(in, -1), Error) << "a window longer than the corpus";
  ::unsetenv("SATURATE_CACHE_DIR");
}

}  // namespace saturate
