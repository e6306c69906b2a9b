// SPDX-License-Identifier: Apache-2.0
// Tokenizers for text:PATH specs: bytes. SentencePiece's Debian library cannot share a process
// with LibTorch (see src/data/CMakeLists.txt), so its tokenizers are refused with that reason.
#include "saturate/core/error.h"
#include "saturate/data/text_corpus.h"

namespace saturate {

bool have_sentencepiece() { return false; }

std::unique_ptr<Tokenizer> make_tokenizer(const TextSpec& spec, const std::vector<std::string>&,
                                          const std::string&) {
  SATURATE_CHECK(spec.tokenizer == "bytes", "data: tokenizer=", spec.tokenizer,
                 " is not available: SentencePiece's library clashes with LibTorch's in one ",
                 "process (both define FLAGS_minloglevel); use tokenizer=bytes");
  return make_byte_tokenizer();
}

}  // namespace saturate
