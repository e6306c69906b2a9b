// SPDX-License-Identifier: Apache-2.0
// saturate-spm: the SentencePiece side of `--data text:PATH,tokenizer=spm:MODEL|train-spm:VOCAB`,
// run by saturate as a child process. Debian's libsentencepiece and LibTorch's libc10 cannot
// share a process (both export FLAGS_minloglevel, and the interposed symbol deadlocks c10's
// logging), so this program links SentencePiece and nothing of saturate or LibTorch.
//
//   saturate-spm info MODEL                  prints "vocab N eos E newline L" (-1: none)
//   saturate-spm encode MODEL OUT FILE...    writes OUT: uint32 little-endian ids; each line's
//                                            pieces, then the newline piece; the eos id between
//                                            files when there are several
//   saturate-spm decode MODEL IDS            prints the text of a file of uint32 ids
//   saturate-spm train VOCAB PREFIX FILE...  trains a unigram model PREFIX.model on the lines
//
// Exit status: 0 done, 2 bad input (a line on stderr names it), 1 any other failure.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace {

constexpr long long kMaxIdsBytes = 1LL << 34;  // 4 Gi ids: far above what a 1 GiB file yields

[[noreturn]] void die(int code, const std::string& what) {
  std::cerr << "saturate-spm: " << what << "\n";
  std::exit(code);
}

void load(sentencepiece::SentencePieceProcessor& sp, const std::string& model) {
  const auto status = sp.Load(model);
  if (!status.ok()) die(2, model + ": not a SentencePiece model (" + status.ToString() + ")");
}

// The piece that stands for a line break: byte fallback's <0x0A>, else the "<n>" symbol that
// `train` adds; -1 when the model has neither (lines are then joined with nothing).
int newline_id(const sentencepiece::SentencePieceProcessor& sp) {
  for (const char* piece : {"<0x0A>", "<n>"}) {
    const int id = sp.PieceToId(piece);
    if (id != sp.unk_id() && sp.IdToPiece(id) == piece) return id;
  }
  return -1;
}

int info(const std::string& model) {
  sentencepiece::SentencePieceProcessor sp;
  load(sp, model);
  std::cout << "vocab " << sp.GetPieceSize() << " eos " << sp.eos_id() << " newline "
            << newline_id(sp) << "\n";
  return 0;
}

void put(std::FILE* out, int id, long long& written) {
  const auto v = static_cast<uint32_t>(id);
  const unsigned char b[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                              static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 24)};
  if (std::fwrite(b, 1, 4, out) != 4) die(1, "cannot write the ids");
  written += 4;
  if (written > kMaxIdsBytes) die(1, "more ids than any corpus of 1 GiB files yields");
}

int encode(const std::string& model, const std::string& out_path, int argc, char** files) {
  sentencepiece::SentencePieceProcessor sp;
  load(sp, model);
  const int newline = newline_id(sp);
  std::FILE* out = std::fopen(out_path.c_str(), "wb");
  if (out == nullptr) die(1, out_path + ": cannot write");
  long long written = 0;
  std::vector<int> ids;
  for (int f = 0; f < argc; ++f) {
    std::ifstream in(files[f], std::ios::binary);
    if (!in) die(2, std::string(files[f]) + ": cannot open");
    std::string line;
    while (std::getline(in, line)) {
      ids.clear();
      const auto status = sp.Encode(line, &ids);
      if (!status.ok()) die(1, std::string(files[f]) + ": " + status.ToString());
      for (int id : ids) put(out, id, written);
      if (newline >= 0 && !in.eof()) put(out, newline, written);
    }
    if (argc > 1 && sp.eos_id() >= 0) put(out, sp.eos_id(), written);
  }
  if (std::fflush(out) != 0 || std::fclose(out) != 0) die(1, out_path + ": cannot write");
  return 0;
}

int decode(const std::string& model, const std::string& ids_path) {
  sentencepiece::SentencePieceProcessor sp;
  load(sp, model);
  std::ifstream in(ids_path, std::ios::binary);
  if (!in) die(2, ids_path + ": cannot open");
  const int newline = newline_id(sp);
  std::vector<int> line;
  std::string text, piece;
  unsigned char b[4];
  auto flush = [&] {
    if (sp.Decode(line, &piece).ok()) text += piece;
    line.clear();
  };
  while (in.read(reinterpret_cast<char*>(b), 4)) {
    const int id = static_cast<int>(b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24);
    if (id < 0 || id >= sp.GetPieceSize()) die(2, ids_path + ": id out of the vocabulary");
    if (id == newline) {
      flush();
      text += '\n';
    } else {
      line.push_back(id);
    }
  }
  flush();
  std::cout << text;
  return 0;
}

// The corpus's lines, file after file, without holding them all.
class Lines final : public sentencepiece::SentenceIterator {
 public:
  Lines(int argc, char** files) : files_(files, files + argc) { Next(); }
  bool done() const override { return done_; }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return status_; }
  void Next() override {
    while (!done_) {
      if (in_.is_open() && std::getline(in_, line_)) {
        if (!line_.empty()) return;
        continue;
      }
      if (in_.is_open()) in_.close();
      if (next_ == files_.size()) {
        done_ = true;
        return;
      }
      in_.clear();
      in_.open(files_[next_++], std::ios::binary);
      if (!in_) die(2, files_[next_ - 1] + ": cannot open");
    }
  }

 private:
  std::vector<std::string> files_;
  size_t next_ = 0;
  std::ifstream in_;
  std::string line_;
  bool done_ = false;
  sentencepiece::util::Status status_;
};

int train(const std::string& vocab, const std::string& prefix, int argc, char** files) {
  Lines lines(argc, files);
  const std::unordered_map<std::string, std::string> args = {
      {"model_prefix", prefix},
      {"vocab_size", vocab},
      {"model_type", "unigram"},
      {"character_coverage", "1.0"},
      {"user_defined_symbols", "<n>"},
      {"hard_vocab_limit", "false"},  // a small corpus may not hold VOCAB pieces
      {"input_sentence_size", "1000000"},  // bounds the trainer's memory on a large corpus
      {"shuffle_input_sentence", "true"},
      {"num_threads", "2"},
      {"minloglevel", "1"},
  };
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines);
  if (!status.ok()) die(1, "training failed: " + status.ToString());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "info" && argc == 3) return info(argv[2]);
  if (cmd == "encode" && argc >= 5) return encode(argv[2], argv[3], argc - 4, argv + 4);
  if (cmd == "decode" && argc == 4) return decode(argv[2], argv[3]);
  if (cmd == "train" && argc >= 5) return train(argv[2], argv[3], argc - 4, argv + 4);
  die(2, "usage: saturate-spm info MODEL | encode MODEL OUT FILE... | decode MODEL IDS | "
         "train VOCAB PREFIX FILE...");
}
