// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private: SentencePiece tokenizers through the saturate-spm helper program (a child process:
// Debian's libsentencepiece cannot share a process with LibTorch; see tools/saturate-spm).

#include <memory>
#include <string>
#include <vector>

#include "saturate/data/text_corpus.h"

namespace saturate::detail {

/// The helper's path: $SATURATE_SPM when set, else saturate-spm next to the running program,
/// else the build tree's, else the installed one; "" when none can run.
std::string spm_helper_path();

/// A tokenizer for SentencePiece model file `model`. Throws saturate::Error naming the file when
/// it is missing or not a model, or naming the helper when it is missing.
std::unique_ptr<Tokenizer> make_spm_tokenizer(const std::string& model);

/// Trains a unigram model of `vocab` pieces on `files` unless `model_path` exists; the model is
/// written beside it and renamed into place. Throws saturate::Error when the helper is missing
/// or training fails.
void train_spm_model(int64_t vocab, const std::vector<std::string>& files,
                     const std::string& model_path);

}  // namespace saturate::detail
