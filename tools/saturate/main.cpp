// SPDX-License-Identifier: Apache-2.0
// saturate: the command-line tool. The one place that catches everything and turns it into a
// message on stderr and an exit code.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "saturate/core/build_info.h"
#include "saturate/core/error.h"
#include "saturate/core/strings.h"

namespace saturate::cli {
namespace {

void on_sigint(int) {
  if (g_interrupted.exchange(true)) {
    // Second Ctrl-C: the user means it.
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

void print_help(std::ostream& out) {
  out << "usage: saturate <command> [options]\n\n"
         "Measure a training job, find what holds it back, and run it faster without hurting\n"
         "model quality.\n\ncommands:\n";
  for (const auto& c : commands()) {
    std::string name = c.name;
    name.resize(10, ' ');
    out << "  " << name << c.summary << "\n";
  }
  out << "\nRun 'saturate <command> --help' for a command's options.\n";
}

int dispatch(int argc, char** argv) {
  if (argc < 2) {
    print_help(std::cerr);
    return static_cast<int>(ExitCode::kUsage);
  }
  const std::string name = argv[1];
  if (name == "--version" || name == "version") {
    std::cout << "saturate " << SATURATE_VERSION << " (git " << SATURATE_GIT_SHA << ", "
              << SATURATE_BUILD_TYPE << ", LibTorch " << SATURATE_TORCH_CMAKE_VERSION
              << (SATURATE_BUILT_WITH_CUDA ? ", CUDA build" : ", CPU-only build") << ")\n";
    return 0;
  }
  if (name == "help" || name == "--help" || name == "-h") {
    if (argc >= 3) {
      for (const auto& c : commands())
        if (argv[2] == std::string(c.name)) return c.run({"--help"});
    }
    print_help(std::cout);
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  std::vector<std::string> names;
  for (const auto& c : commands()) {
    if (name == c.name) return c.run(args);
    names.push_back(c.name);
  }
  SATURATE_CHECK(false, "unknown command '", name, "'", did_you_mean(name, names),
                 " (see 'saturate help')");
  return 0;
}

}  // namespace
}  // namespace saturate::cli

namespace saturate::cli {
namespace {

// Under torchrun, a failing worker says why in TORCHELASTIC_ERROR_FILE; the agent prints it as
// the root cause of the job's failure (a Python worker's traceback goes there; ours is the one
// error line). Written once, best effort: the exit code and stderr stay the primary report.
int fail(const char* kind, const std::string& message, ExitCode code) {
  // One write: a launcher that stops the job with SIGTERM must not cut the line in two.
  const std::string line = "saturate: error: " + message + "\n";
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  std::cerr.flush();
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (path != nullptr && *path != '\0') {
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    nlohmann::json j;
    j["message"] = {{"message", std::string(kind) + ": " + message},
                    {"extraInfo", {{"py_callstack", "saturate: error: " + message},
                                   {"timestamp", std::to_string(now)}}}};
    std::ofstream(path) << j.dump() << "\n";
  }
  return static_cast<int>(code);
}

}  // namespace
}  // namespace saturate::cli

int main(int argc, char** argv) {
  using saturate::cli::ExitCode;
  using saturate::cli::fail;
  std::signal(SIGINT, saturate::cli::on_sigint);
  // A data-parallel rank whose peer died must get an error from its socket, not be killed by
  // SIGPIPE (CPython ignores it, so Python jobs never see this).
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return saturate::cli::dispatch(argc, argv);
  } catch (const saturate::RunFailure& e) {
    return fail("RuntimeError", e.what(), ExitCode::kFailure);
  } catch (const saturate::Error& e) {
    return fail("UsageError", e.what(), ExitCode::kUsage);
  } catch (const CLI::ParseError& e) {
    return fail("UsageError", e.what(), ExitCode::kUsage);
  } catch (const c10::Error& e) {
    return fail("RuntimeError", saturate::first_line(e.what_without_backtrace()),
                ExitCode::kFailure);
  } catch (const std::exception& e) {
    return fail("RuntimeError", e.what(), ExitCode::kFailure);
  }
}
