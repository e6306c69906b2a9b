// SPDX-License-Identifier: Apache-2.0
#pragma once
// Errors: saturate::Error for caller, configuration and environment mistakes (the CLI maps it
// to exit code 2), SATURATE_CHECK to raise it; saturate::RunFailure (SATURATE_CHECK_RUN) for a
// run that failed for another reason (exit 1); SATURATE_ASSERT for broken internal invariants.
//
//   SATURATE_CHECK(batch_size > 0, "train: --batch-size must be positive, got ", batch_size);

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace saturate {

/// A mistake the user can fix: a bad flag, a corrupt file, an impossible configuration or an
/// unusable environment. Messages start lowercase with the component ("data: ..."), name the
/// value received and what was expected, and carry no trailing period.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A run that failed for a reason other than its input: a write that failed mid-run (disk full,
/// the folder removed), a process of a job that died. Not the user's flag or file, so the CLI
/// exits 1 with it, not 2. Derives from Error so code that passes Errors on passes it on too.
class RunFailure : public Error {
 public:
  explicit RunFailure(const std::string& message) : Error(message) {}
};

/// An internal invariant did not hold: a bug in saturate, never the user's input.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

namespace detail {
template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}
[[noreturn]] void throw_error(const std::string& message);
[[noreturn]] void throw_run_failure(const std::string& message);
[[noreturn]] void throw_internal(const char* file, int line, const char* cond,
                                 const std::string& message);
}  // namespace detail

}  // namespace saturate

/// Throws saturate::Error with the concatenated parts when `cond` is false.
#define SATURATE_CHECK(cond, ...)                                          \
  do {                                                                     \
    if (!(cond)) ::saturate::detail::throw_error(                          \
        ::saturate::detail::concat(__VA_ARGS__));                          \
  } while (0)

/// Throws saturate::RunFailure with the concatenated parts when `cond` is false.
#define SATURATE_CHECK_RUN(cond, ...)                                      \
  do {                                                                     \
    if (!(cond)) ::saturate::detail::throw_run_failure(                    \
        ::saturate::detail::concat(__VA_ARGS__));                          \
  } while (0)

/// Always-on invariant check; throws saturate::InternalError naming the file and line.
#define SATURATE_ASSERT(cond, ...)                                          \
  do {                                                                      \
    if (!(cond)) ::saturate::detail::throw_internal(                        \
        __FILE__, __LINE__, #cond, ::saturate::detail::concat("", ##__VA_ARGS__)); \
  } while (0)

#ifdef NDEBUG
#define SATURATE_DCHECK(cond, ...) \
  do {                             \
  } while (0)
#else
#define SATURATE_DCHECK(cond, ...) SATURATE_ASSERT(cond, ##__VA_ARGS__)
#endif
