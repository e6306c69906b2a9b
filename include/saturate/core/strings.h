// SPDX-License-Identifier: Apache-2.0
#pragma once
// Small string helpers shared by parsers and the CLI: edit distance, "did you mean", lines.
//
//   auto hint = saturate::did_you_mean("fmnist-cn", {"mlp", "fmnist-cnn"});  // "; did you mean 'fmnist-cnn'?"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace saturate {

/// Levenshtein distance (insert, delete, substitute each cost 1).
size_t edit_distance(const std::string& a, const std::string& b);
/// The candidate closest to `word`, if it is close enough to be a plausible typo
/// (distance <= max(2, word.size() / 3)).
std::optional<std::string> closest_match(const std::string& word,
                                         const std::vector<std::string>& candidates);
/// "; did you mean 'x'?" or "; expected one of: a, b, c" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
/// Joins with `sep`.
std::string join(const std::vector<std::string>& parts, const std::string& sep);
/// "1 thread", "2 threads": `n` and the noun, with an s unless n is 1.
std::string count_of(int64_t n, const std::string& noun);
/// `text` up to its first newline (error messages carry tracebacks after it).
std::string first_line(const std::string& text);

}  // namespace saturate
